#!/bin/bash
# KHR against NV cooperative matrices on the H200 (issue 46; bench/journal/2026-12-04-linear-cm-khr.md):
# the matrix-unit kernel tests and goldens with the default (KHR), then in one call the prompt
# linears alone (vulkan_linear_bench), the QAT prefill (vulkan_bench) and the vision tower
# (vision_bench) under CM_KHR=0 and the default. Binaries in $B; outputs to stdout and $OUT/khr.txt.
# Usage: B=dir bash bench/vulkan/khr_h200.sh [tests|perf|all]
set -u
what=${1:-all}
log() { echo "$@" | tee -a $OUT/khr.txt; }
run() { "$@" 2>&1 | tee -a $OUT/khr.txt; }
if [ "$what" != perf ]; then
  log "## tests (CM_KHR default)"
  run $B/vulkan_test --gtest_filter='VulkanKernels.*:VulkanBackend.*Prefill*:VulkanBackend.*FullWidth*' --gtest_brief=1 | tail -5
  run $B/vulkan_golden_test --gtest_brief=1 | tail -3
  run $B/vision_golden_test --gtest_brief=1 | grep -E "vulkan|PASSED|FAILED" | tail -8
  run $B/audio_golden_test --gtest_brief=1 | grep -E "vulkan|PASSED|FAILED" | tail -6
fi
if [ "$what" != tests ]; then
  [ -e /tmp/towers/model.safetensors ] || $B/gemma-engine synth --preset e2b-towers --out /tmp/towers > /dev/null
  for k in "CM_KHR=0" ""; do
    log "## kernels: '${k:-default}'"
    GEMMA_VULKAN_KERNELS="$k" run $B/vulkan_linear_bench | grep -v "^kernels"
    GEMMA_VULKAN_KERNELS="$k" run $B/vision_bench /tmp/towers --backend vulkan --budgets 70,280,1120 --reps 5 | tail -8
    GEMMA_VULKAN_KERNELS="$k" $B/vulkan_bench --synth /tmp/e2b-qat --prompt 1024 --ctx 512 --steps 16 --runs 3 > /tmp/vb.txt 2>&1
    cat /tmp/vb.txt >> $OUT/khr.txt; grep -iE "prefill|attention_cm|linear_cm|split" /tmp/vb.txt | head -12
  done
fi
