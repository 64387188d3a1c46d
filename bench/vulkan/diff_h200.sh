#!/bin/bash
# Randomized differential decode test on the H200 (issue 34): vulkan_diff_test's random
# configurations (tests/decode_diff_util.h: random small structures, dense and QAT, a random prompt,
# then one-token steps each compared against the CPU reference) in many more configurations than CI
# runs, in chunks of CHUNK seeds per process (the NVIDIA driver refuses vkCreateInstance after ~30
# instances per process; each seed makes two backends, dense and QAT, and the test fails where one is refused). Run from the repo root with
# build-vulkan and .gl carried, like run_h200.sh. Outputs go to $OUT (diff.txt: one line per chunk,
# diff_<seed>.log: the chunk's output, kept where it failed).
# Usage: [CONFIGS=300] [SEED=1000] [STEPS=256] [CHUNK=10] [STRICT=1] [TIMEOUT=500] [KNOBS="ENV=.."]
#        bash bench/vulkan/diff_h200.sh
# STRICT=1 asks every QAT position to be exact (no SRQ allowance); KNOBS sets backend knobs for
# every run (kernel choices, kernel_config.h: e.g. KNOBS=ATTN_FUSED=1 checks the fused attention). The fast CPU backend's
# counterpart is cheap anywhere: GEMMA_DIFF_CONFIGS=500 build/.../cpu_fast_diff_test
# --gtest_filter=*Random*.
for f in .gl/*.deb; do [ -e "$f" ] && dpkg -x $f /; done; ldconfig
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -e $icd ] && export VK_DRIVER_FILES=$icd
[ -e /work/main ] || { mkdir -p /work; ln -sfn "$PWD" /work/main; }
B=${BIN:-build-vulkan/src/backend/vulkan/vulkan_diff_test}
CONFIGS=${CONFIGS:-300}; SEED=${SEED:-1000}; STEPS=${STEPS:-256}; CHUNK=${CHUNK:-10}
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name --format=csv,noheader >> $OUT/diff.txt 2>&1
echo "configs $CONFIGS (x2: dense and QAT) from seed $SEED, $STEPS steps, strict ${STRICT:-0}, knobs: ${KNOBS:-none}" >> $OUT/diff.txt
fails=0
t0=$(date +%s)
for ((s = SEED; s < SEED + CONFIGS; s += CHUNK)); do
  n=$(( SEED + CONFIGS - s < CHUNK ? SEED + CONFIGS - s : CHUNK ))
  log=$OUT/diff_$s.log
  env GEMMA_VULKAN_KERNELS="$KNOBS" GEMMA_DIFF_CONFIGS=$n GEMMA_DIFF_SEED=$s GEMMA_DIFF_STEPS=$STEPS GEMMA_DIFF_STRICT=${STRICT:-0} \
    timeout ${TIMEOUT:-500} $B --gtest_filter='*Random*' > $log 2>&1
  rc=$?
  res=$(grep -E "^\[  (PASSED|FAILED|SKIPPED) " $log | head -1)
  echo "seeds $s..$(( s + n - 1 )): rc $rc $res $(grep -h 'failed configurations' $log)" >> $OUT/diff.txt
  if [ $rc -eq 0 ]; then rm -f $log; else fails=$((fails + 1)); fi
done
echo "chunks failed: $fails, $(( $(date +%s) - t0 )) s" >> $OUT/diff.txt
tail -3 $OUT/diff.txt
