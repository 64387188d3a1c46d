#!/usr/bin/env bash
# The test tier CI skips (ctest label "slow": kernel-variant tables, long differential runs), for
# the GPU machine or a patient local run. From the checkout root with a configured build:
#   bash bench/run_slow_tests.sh [BUILD_DIR=build] [ctest args...]
# On the H200 machine (.gl carried, see bench/vulkan/run_h200.sh) it unpacks the Vulkan loader
# first. Every test runs in its own process (ctest), so the NVIDIA driver's per-process instance
# limit does not apply.
set -euo pipefail
build=${1:-build}
shift || true
if [ -d .gl ]; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  export VK_DRIVER_FILES=${VK_DRIVER_FILES:-/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json}
fi
ctest --test-dir "$build" -L slow --output-on-failure -j"$(nproc)" "$@"
