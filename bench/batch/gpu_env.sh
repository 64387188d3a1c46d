# Sourced by the bench/batch GPU scripts (spec_gpu.sh, rows_gpu.sh) on the device machine: the
# Vulkan loader from .gl, the binaries of .carry/c/pack.tar.xz in $B (their libraries on the
# library path), the GPU's name in $OUT/gpu.txt, the synthetic E2B QAT checkpoint in /tmp/e2bq, and
# run CMD...: CMD echoed and run, both into $OUT/log.txt.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
tar xJf .carry/c/pack.tar.xz -C /tmp || exit 1
export LD_LIBRARY_PATH=/tmp/b/lib
B=/tmp/b/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
[ -d /tmp/e2bq ] || $B/gemma-engine synth --preset e2b-qat --out /tmp/e2bq > /dev/null || exit 1
run() { echo "== $*" | tee -a $OUT/log.txt; "$@" 2>&1 | tee -a $OUT/log.txt; }
