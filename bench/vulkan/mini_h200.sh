#!/bin/bash
# The Vulkan backend's departure on the H200 at E2B width (docs/reliability.md, "Runs"): greedy
# tokens of the synthetic e2b-qat-mini checkpoint on `cpu` and on `vulkan` with one kernel choice
# toggled at a time. Needs a gemma-engine package (.bin/batch/pack.sh build/tools/gemma-engine,
# moved to .bin/soak/pkg.tar.xz) and the loader debs in .gl (docs: ../shared/docs/gpu-machine.md);
# carry [".gl", ".bin/soak"]; run from the repository root.
for f in .gl/*.deb; do dpkg -x $f / 2>/dev/null; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p /tmp/p; [ -x /tmp/p/gemma-engine ] || tar xJf .bin/soak/pkg.tar.xz -C /tmp/p
export LD_LIBRARY_PATH=/tmp/p/lib
[ -d /tmp/mini-qat ] || /tmp/p/gemma-engine synth --preset e2b-qat-mini --out /tmp/mini-qat >/dev/null
P="Write one sentence about free software."
echo "cpu $(/tmp/p/gemma-engine run --model /tmp/mini-qat --backend cpu --threads 8 -n 3 -p "$P" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')"
for kc in "" "DOWN_FUSE=0" "PLE_FUSE=0" "HEAD_NORM=0" "MV_WGS=0" "DP=0" "XQ_SHARED=0" "SHARE_X=0" "RMS_FAST=0" "MV_FAST=0" "CNORM=0" "TAILS=0" "SPLITS_ADAPT=0" "MV_LANES=0" "ATTN_FUSED=0" "PACK_ATOMIC=0" "XQ_PERM=0" "DOWN_FUSE=0 PLE_FUSE=0 HEAD_NORM=0 CNORM=0 TAILS=0 SHARE_X=0 XQ_SHARED=0 MV_WGS=0 RMS_FAST=0"; do
  t=$(GEMMA_VULKAN_KERNELS="$kc" timeout 20 /tmp/p/gemma-engine run --model /tmp/mini-qat --backend vulkan -n 3 -p "$P" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])' 2>&1 | tail -1)
  echo "'$kc' $t"
done
