#!/bin/bash
# Issue 43 on the GPU machine, one device call: Vulkan batched decode and verification steps below
# the runtime (vulkan_batch_bench), speculative decoding through a session (gemma-engine bench spec
# workloads, verification steps as chunks (the default) and as rows), batched and speculating sessions (batch_bench). Carry
# [".gl", ".carry/c"]: .carry/c/pack.tar.xz holds gemma-engine, batch_bench, vulkan_batch_bench,
# vulkan_check and their libraries (b/bin, b/lib). Outputs in $OUT. Usage: bash bench/batch/spec_gpu.sh
# First the exactness check: verification steps against the one-token steps, bit for bit
# (vulkan_check --verify: "0 logits differ" on both paths; bench/journal/2026-12-05-nocontraction.md).
. bench/batch/gpu_env.sh
run timeout 100 $B/vulkan_check --verify /tmp/e2bq 4 80 512
run timeout 100 $B/vulkan_check --verify /tmp/e2bq 6 70 512
run timeout 60 $B/vulkan_batch_bench /tmp/e2bq --ctx 512 --batches 1,4,8,16
run timeout 150 $B/gemma-engine bench --model /tmp/e2bq --backends vulkan --workloads spec512+tg256 --no-cold --reps 3 --verify-max-tokens 0 --draft 4 --drafts right,wrong,half --out $OUT/spec4
GEMMA_VULKAN_KERNELS=VERIFY_ROWS=2 run timeout 100 $B/gemma-engine bench --model /tmp/e2bq --backends vulkan --workloads spec512+tg256 --no-cold --reps 3 --verify-max-tokens 0 --draft 4 --drafts right,half --out $OUT/spec4rows
run timeout 90 $B/batch_bench /tmp/e2bq --backend vulkan --tokens 128 --runs 2 --batches 1,4,8,16
run timeout 90 $B/batch_bench /tmp/e2bq --backend vulkan --tokens 128 --runs 1 --batches 1,4,8 --unbatched 0 --drafts half --draft 4
run timeout 60 $B/batch_bench /tmp/e2bq --backend vulkan --tokens 128 --runs 1 --batches 1,4,8 --unbatched 0 --drafts right --draft 4
