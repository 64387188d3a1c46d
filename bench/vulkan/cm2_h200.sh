#!/bin/bash
# Workgroup-scope matrices (VK_NV_cooperative_matrix2, linear_cm2.comp) against the subgroup-scope
# kernels (linear_cm, KHR) on the GPU machine, in one call (issue 46): the prompt linears alone
# (vulkan_linear_bench: each variant's outputs against the first's, bit for bit for SRQ kinds), the
# QAT prefill (vulkan_bench) and the vision tower (vision_bench), CM2=1 and the default, alternated.
# Binaries in $B; outputs to stdout and $OUT/cm2.txt.
# Usage: B=dir bash bench/vulkan/cm2_h200.sh [prefill|lin|tower|tests]...
set -u
log() { echo "$@" | tee -a $OUT/cm2.txt; }
run() { "$@" 2>&1 | tee -a $OUT/cm2.txt; }
set -- ${@:-prefill lin tower}
for what in "$@"; do
  case $what in
    lin)
      log "## linears: CM2=1 | CM2=1 probe=noepi | default"
      [ -e /tmp/e2b-qat/model.safetensors ] || $B/vulkan_bench --synth /tmp/e2b-qat --prompt 8 --steps 1 --runs 1 > /dev/null 2>&1
      run $B/vulkan_linear_bench --model /tmp/e2b-qat --variants "CM2=1|CM2=1 probe=noepi|default" | grep -v "^kernels" ;;
    prefill)
      for k in "CM2=1" ""; do
        log "## prefill 1024, kernels '${k:-default}'"
        GEMMA_VULKAN_KERNELS="$k" $B/vulkan_bench --synth /tmp/e2b-qat --prompt 1024 --ctx 512 \
          --steps 8 --runs 3 > /tmp/vb.txt 2>&1
        cat /tmp/vb.txt >> $OUT/cm2.txt; grep -iE "prefill|error" /tmp/vb.txt | head -4
      done ;;
    tower)
      [ -e /tmp/towers/model.safetensors ] || $B/gemma-engine synth --preset e2b-towers --out /tmp/towers > /dev/null
      for k in "CM2=1" ""; do
        log "## vision tower, kernels '${k:-default}'"
        GEMMA_VULKAN_KERNELS="$k" run $B/vision_bench /tmp/towers --backend vulkan --budgets 280,1120 --reps 5 | tail -3
      done ;;
    tests)
      log "## tests (CM2=1)"
      GEMMA_VULKAN_KERNELS=CM2=1 run $B/vulkan_test --gtest_filter='VulkanKernels.Linear*:VulkanKernels.GateUp*:VulkanKernels.Dense*:VulkanKernels.DownFusion*:VulkanBackend.FullWidth*' --gtest_brief=1 | tail -5 ;;
  esac
done
