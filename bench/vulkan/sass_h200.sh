#!/bin/bash
# The Vulkan pipelines' machine code on the H200 (inspection only; run from the repo root with
# build-vulkan and .gl carried): every pipeline of a short e2b-qat decode run is dumped from its own
# pipeline cache (GEMMA_VULKAN_PIPE_DUMP) with the driver's statistics, then extracted and
# disassembled by bench/vulkan/sass_h200.py (the dump decompresses the driver's data itself where
# libzstd.so.1 loads; otherwise extract here with the zstd CLI, carry the .code files and run
# `sass_h200.py disasm DIR` there).
# Usage: [TAG=x] bash bench/vulkan/sass_h200.sh [ENV...]   (outputs: $OUT/sass$TAG.tgz, .txt)
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
B=build-vulkan/src/backend/vulkan
rm -rf /tmp/pd /tmp/sass; mkdir -p /tmp/pd /tmp/sass
env GEMMA_VULKAN_PIPE_DUMP=/tmp/pd GEMMA_VULKAN_KERNELS="PIPE_STATS=1 ${KERNELS:-}" "$@" timeout 200 $B/vulkan_bench \
    --synth /tmp/e2b --ctx 64 --prompt 64 --steps 2 --runs 1 --copy-mb 16 > /tmp/sass/bench.txt 2>&1
grep -E "pipe-(dump|stats)" /tmp/sass/bench.txt > $OUT/sass$TAG.txt
if ls /tmp/pd/*.raw > /dev/null 2>&1 || command -v zstd > /dev/null; then
  python3 bench/vulkan/sass_h200.py extract /tmp/pd /tmp/sass >> $OUT/sass$TAG.txt 2>&1
  python3 bench/vulkan/sass_h200.py disasm /tmp/sass >> $OUT/sass$TAG.txt 2>&1
else
  echo "no libzstd / zstd here: extract the blobs elsewhere" >> $OUT/sass$TAG.txt
fi
tar czf $OUT/sass$TAG.tgz -C /tmp sass pd
