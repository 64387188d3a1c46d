#!/bin/bash
# One H200 session of the Vulkan backend (run from the repo root with build-vulkan and .gl carried):
# loader, the Vulkan tests, the synthetic E2B checkpoint, then vulkan_bench once per kernel variant
# (environment knobs of the backend; BIN=path: another build). Outputs go to $OUT.
# Usage: [STEPS=32] [NOTESTS=1] [TEST_TIMEOUT=300] bash bench/vulkan/run_h200.sh TAG:ENV...
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
# The tests find their fixtures through the compiled-in source dir.
[ -e /work/main ] || { mkdir -p /work; ln -sfn "$PWD" /work/main; }
B=build-vulkan/src/backend/vulkan
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv >> $OUT/tests.txt 2>&1  # (appends: a command before the script may have written)
# One process per test: the NVIDIA driver refuses vkCreateInstance after ~30 instances per process.
[ -n "$NOTESTS" ] || for t in $($B/vulkan_test --gtest_list_tests | awk '/^[^ ]/{s=$1} /^  /{print s $1}'); do
  timeout ${TEST_TIMEOUT:-300} $B/vulkan_test --gtest_filter="$t" 2>&1 | grep -E "^\[  (PASSED|FAILED|SKIPPED) |Failure" | sed "s|^|$t: |" >> $OUT/tests.txt
done
[ -n "$NOTESTS" ] || timeout 120 $B/vulkan_golden_test 2>&1 | grep -E "PASSED|FAILED|SKIPPED|tests ran" >> $OUT/tests.txt
t0=$(date +%s)
$B/vulkan_bench --synth /tmp/e2b --ctx 8 --prompt 8 --steps 1 --runs 1 > /dev/null 2>&1
echo "synth e2b-qat + warm: $(( $(date +%s) - t0 )) s" >> $OUT/tests.txt
for v in "$@"; do
  tag=${v%%:*}; envs=${v#*:}
  echo "variant $tag: $envs" > $OUT/bench_$tag.txt
  nvidia-smi --query-gpu=clocks.sm,clocks.mem,power.draw --format=csv,noheader -lms 100 > /tmp/clk_$tag.txt 2>&1 &
  smi=$!
  # BIN=path in a variant's environment runs another vulkan_bench build (carried, e.g. a baseline).
  # CTX=n: decode from n tokens of context instead of 512.
  bin=$(echo "$envs" | grep -o 'BIN=[^ ]*' | cut -d= -f2)
  ctx=$(echo "$envs" | grep -o 'CTX=[^ ]*' | cut -d= -f2)
  ctx=${ctx:-512}
  # PRESET=name: another synthetic checkpoint (e.g. e2b-bf16), written to /tmp/e2b-name on first use.
  preset=$(echo "$envs" | grep -o 'PRESET=[^ ]*' | cut -d= -f2)
  model=/tmp/e2b${preset:+-$preset}
  # --runs 5: the prefill's median over 5 runs after a warm-up (with 2, a short prefill measured
  # what is most likely the GPU's clock ramp: the bf16 E2B's first runs took 175 / 85 ms, then 64;
  # twenty-third session).
  # The variant's GEMMA_VULKAN_X=v words are kernel choices: GEMMA_VULKAN_KERNELS (kernel_config.h).
  kern=$(echo "$envs" | tr ' ' '\n' | grep '^GEMMA_VULKAN_' | tr '\n' ' ')
  env $envs GEMMA_VULKAN_KERNELS="$kern" timeout 150 ${bin:-$B/vulkan_bench} --synth $model ${preset:+--preset $preset} --ctx $ctx --prompt 1024 --steps ${STEPS:-32} \
      --runs 5 --copy-mb 512 --capacity $(( ctx + 1536 > 2048 ? ctx + 1536 : 2048 )) >> $OUT/bench_$tag.txt 2>&1
  kill $smi 2>/dev/null
  echo "SM clock MHz during the run (samples every 100 ms, count x value): $(awk -F, '{print $1}' /tmp/clk_$tag.txt | sort | uniq -c | sort -rn | head -5 | tr -s ' ' | tr '\n' ';')" >> $OUT/bench_$tag.txt
  echo "$tag $(grep '^{' $OUT/bench_$tag.txt | tail -1)"; tail -1 $OUT/bench_$tag.txt
done
