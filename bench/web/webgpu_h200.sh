#!/bin/bash
# The WebGPU backend on the H200 beside the native Vulkan backend, in one device call (issue 45).
# Carry [".gl", ".carry/c"]: .carry/c/pack.tar.xz holds gemma-engine and its
# libraries (/work/pack.sh-style: b/bin, b/lib), .carry/c/nodepack.tar.xz Node (nodepack/bin/node)
# and the npm package `webgpu` for linux-x64 (nodepack/webgpu). Outputs go to $OUT.
# .carry/c/webs.tar.xz (optional): builds to compare, webs/NAME/{lib,gemma-engine.js,gemma-engine.wasm}.
# Size: Node alone is ~29 MB as xz and the tracked tree ~51 MB, over the call's 64 MiB; for the call,
# take the goldens out of the copy (`git rm -r -q --cached tests/goldens models` and both paths in
# .git/info/exclude), then `git reset -q` and empty the exclude right after (commit nothing between).
# Usage: bash bench/web/webgpu_h200.sh STEP...   (steps: native, compare, long, profile, profile-nosg,
#   kernels: linear_mv_wg alone on E2B's shapes (wgsl_kernel_bench.mjs); adapter: Dawn's adapter
#   (features with and without allow_unsafe_apis, limits, WGSL features: adapter_info.mjs);
#   ab: every build in webs/ alternated twice, 32 tokens after 511, then 8 after 1,021 (one run
#   each: the prefill figure includes the first use's pipeline creation);
#   abp: the same with two runs per engine (medians: warm prefill figures);
#   profile-NAME[:FAMILY]: the profile with webs/NAME (its FAMILY, default workgroup); run-NAME:FAMILIES: webs/NAME's families (webgpu_bench.mjs's
#   KERNELS, e.g. workgroup-mv0,workgroup-mv1024) side by side, twice)
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
tar xJf .carry/c/pack.tar.xz -C /tmp && tar xJf .carry/c/nodepack.tar.xz -C /tmp || exit 1
[ -f .carry/c/webs.tar.xz ] && tar xJf .carry/c/webs.tar.xz -C /tmp
export LD_LIBRARY_PATH=/tmp/b/lib PATH=/tmp/nodepack/bin:$PATH
mkdir -p .cache/npm-assets/node_modules && ln -sfn /tmp/nodepack/webgpu .cache/npm-assets/node_modules/webgpu
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
# (the synthetic model, once a step needs it)
[[ $# == 1 && ( $1 == kernels || $1 == adapter ) ]] || [ -d /tmp/e2bq ] ||
  /tmp/b/bin/gemma-engine synth --preset e2b-qat --out /tmp/e2bq > /dev/null || exit 1
for step in "$@"; do
  echo "== $step" | tee -a $OUT/log.txt
  case $step in
    kernels) timeout 300 node bench/web/wgsl_kernel_bench.mjs 200 ;;
    adapter) timeout 60 node bench/web/adapter_info.mjs backend=vulkan ;;
    native) timeout 240 /tmp/b/bin/gemma-engine bench --model /tmp/e2bq --backends vulkan \
              --workloads pp512+tg16,pp1024+tg8,pp512+tg64 --no-cold --reps 3 --verify-max-tokens 0 --out $OUT/native ;;
    compare) timeout 300 node bench/web/webgpu_bench.mjs /tmp/e2bq 32 2 backend=vulkan workgroup,workgroup-nosg,nocpu 85 ;;
    long) timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 8 2 backend=vulkan workgroup,nocpu 170 ;;
    profile) timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 80 1 backend=vulkan workgroup,nocpu,profile 85 ;;
    ab) for r in 1 2; do for b in $(ls /tmp/webs); do echo "-- $b"; GEMMA_WEB_BUILD_DIR=/tmp/webs/$b timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 32 1 backend=vulkan workgroup,nocpu 85; done; done
        for b in $(ls /tmp/webs); do echo "-- $b"; GEMMA_WEB_BUILD_DIR=/tmp/webs/$b timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 8 1 backend=vulkan workgroup,nocpu 170; done ;;
    abp) for r in 1 2; do for b in $(ls /tmp/webs); do echo "-- $b"; GEMMA_WEB_BUILD_DIR=/tmp/webs/$b timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 32 2 backend=vulkan workgroup,nocpu 85; done; done
        for b in $(ls /tmp/webs); do echo "-- $b"; GEMMA_WEB_BUILD_DIR=/tmp/webs/$b timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 8 2 backend=vulkan workgroup,nocpu 170; done ;;
    run-*:*) b=${step#run-}; b=${b%%:*}; for r in 1 2; do echo "-- $b ${step#*:} ($r)"; GEMMA_WEB_BUILD_DIR=/tmp/webs/$b timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 32 1 backend=vulkan ${step#*:},nocpu 85; done ;;
    profile-nosg) timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 80 1 backend=vulkan workgroup-nosg,nocpu,profile 85 ;;
    profile-?*) b=${step#profile-}; f=workgroup; [[ $b == *:* ]] && f=${b#*:} && b=${b%%:*}
        GEMMA_WEB_BUILD_DIR=/tmp/webs/$b timeout 200 node bench/web/webgpu_bench.mjs /tmp/e2bq 80 1 backend=vulkan $f,nocpu,profile 85 ;;
  esac 2>&1 | tee -a $OUT/log.txt
done
