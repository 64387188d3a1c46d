#!/bin/bash
# Issue 43 on the GPU machine, one device call: the short steps (a batch's rows, verification
# steps) checked (vulkan_check --verify: "0 logits differ" on the chunk and rows paths against the
# one-token steps, 5-16 tokens) and timed below the runtime, each variant given (a
# GEMMA_VULKAN_KERNELS value: ROWS_* and the other kernel choices) verified too and alternated with
# the defaults; the 8-row profile; then speculative and batched sessions through the engine.
# Carry [".gl", ".carry/c"]: .carry/c/pack.tar.xz holds gemma-engine, vulkan_batch_bench,
# vulkan_check and batch_bench and their libraries (b/bin, b/lib), built by name (bench programs
# are EXCLUDE_FROM_ALL: `ninja -C build vulkan_batch_bench vulkan_check batch_bench gemma-engine`).
# Outputs in $OUT.
# Usage: bash bench/batch/rows_gpu.sh ["KERNELS" ...]
. bench/batch/gpu_env.sh
for K in 4 7 8 15; do run timeout 100 $B/vulkan_check --verify /tmp/e2bq $K 40 512 ""; done
for v in "$@"; do
  for K in 4 15; do run timeout 100 $B/vulkan_check --verify /tmp/e2bq $K 40 512 "$v"; done
done
bench() {
  echo "## kernels: $1" | tee -a $OUT/log.txt
  GEMMA_VULKAN_KERNELS="$1" run timeout 60 $B/vulkan_batch_bench /tmp/e2bq --ctx 512 --batches 1,4,8,16 --steps 24
}
bench ""
for v in "$@"; do bench "$v"; bench ""; done
run timeout 60 $B/vulkan_batch_bench /tmp/e2bq --ctx 512 --batches 8 --steps 8 --profile 1
# Through the engine: speculative decoding with right / wrong drafts (the verification steps are
# short steps), and batched sessions.
run timeout 150 $B/gemma-engine bench --model /tmp/e2bq --backends vulkan --workloads spec512+tg256 --no-cold --reps 2 --verify-max-tokens 0 --draft 4 --drafts right,wrong --out $OUT/spec4
run timeout 90 $B/batch_bench /tmp/e2bq --backend vulkan --tokens 128 --runs 2 --batches 1,4,8,16
