#!/bin/bash
# Issue 43 on the GPU machine, one device call: the short steps' matvec choices (ROWS_* kernel
# choices: how many tokens take the matvecs and how many a workgroup, split K) A/B below the
# runtime, after the exactness checks (vulkan_check --verify: "0 logits differ" on both paths);
# then speculative and batched sessions through the engine. Carry [".gl", ".carry/c"]:
# .carry/c/pack.tar.xz holds gemma-engine, vulkan_batch_bench, vulkan_check and batch_bench and
# their libraries (b/bin, b/lib), built by name (bench programs are EXCLUDE_FROM_ALL:
# `ninja -C build vulkan_batch_bench vulkan_check batch_bench gemma-engine`). Outputs in $OUT.
# Usage: bash bench/batch/rows_gpu.sh
. bench/batch/gpu_env.sh
run timeout 100 $B/vulkan_check --verify /tmp/e2bq 4 40 512 ""
run timeout 100 $B/vulkan_check --verify /tmp/e2bq 7 40 512 ""
run timeout 100 $B/vulkan_check --verify /tmp/e2bq 8 40 512 ""
run timeout 100 $B/vulkan_check --verify /tmp/e2bq 15 40 512 ""
# (twice: the run-to-run spread; a variant's A/B: GEMMA_VULKAN_KERNELS="ROWS_..." before `run`)
for i in 1 2; do run timeout 60 $B/vulkan_batch_bench /tmp/e2bq --ctx 512 --batches 1,4,8,16 --steps 24; done
run timeout 60 $B/vulkan_batch_bench /tmp/e2bq --ctx 512 --batches 8 --steps 8 --profile 1
# Through the engine: speculative decoding with right / wrong drafts (the verification steps are
# short steps), and batched sessions.
run timeout 150 $B/gemma-engine bench --model /tmp/e2bq --backends vulkan --workloads spec512+tg256 --no-cold --reps 2 --verify-max-tokens 0 --draft 4 --drafts right,wrong --out $OUT/spec4
run timeout 90 $B/batch_bench /tmp/e2bq --backend vulkan --tokens 128 --runs 2 --batches 1,4,8,16
