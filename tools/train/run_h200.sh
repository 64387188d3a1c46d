#!/bin/bash
# Issue 42 on the H200 (one call, ~6 min): (c) train_small.py rerun with the shipped seed and one
# with another seed (background, GPU), (b) gemma-engine perplexity on Vulkan for bf16 and QAT,
# (a) qat_numerics.py: transformers' per-token NLLs in f32/f64 on CPU/CUDA.
# Staging, in the checkout the device tool sends (ignored folder .bin/trained): this script as run.sh,
# train_small.py and qat_numerics.py, corpus/ (build_corpus.py's output), template.jinja (the E2B
# chat template), pkg.tar.xz (gemma-engine plus its non-glibc shared libraries under lib/).
#   run: command "bash .bin/trained/run.sh", carry [".bin/trained", ".gl"]
T=.bin/trained; S=$OUT/summary.txt; t0=$(date +%s); export PYTHONUNBUFFERED=1
el() { echo "($(( $(date +%s) - t0 )) s)"; }
G="--budget-s 560 --pretrain-max-s 400 --sft-max-s 150 --qat-max-s 200"
(timeout 520 python3 $T/train_small.py --data $T/corpus --template $T/template.jinja --out /tmp/rerun $G > $OUT/train_log.txt 2>&1; echo "train rc $? $(el)" >> $S) &
P1=$!
(timeout 520 python3 $T/train_small.py --data $T/corpus --template $T/template.jinja --out /tmp/seed2 --seed 7 --no-goldens $G > /tmp/seed2.log 2>&1; echo "seed2 rc $? $(el)" >> $S) &
P2=$!
for f in .gl/*.deb; do dpkg -x $f / >/dev/null 2>&1; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
mkdir -p /tmp/ge /tmp/vk && tar xJf $T/pkg.tar.xz -C /tmp/ge
M=models/tiny-trained; F=$M/heldout_sample.txt
for v in bf16 qat; do d=$M; [ $v = qat ] && d=$M/qat
  for cs in "256 255" "128 64"; do set -- $cs
    LD_LIBRARY_PATH=/tmp/ge/lib timeout 60 /tmp/ge/gemma-engine perplexity --model $d --file $F --context $1 --stride $2 --backend vulkan --json --per-token > /tmp/vk/${v}_c$1.json 2> /tmp/vk/${v}_c$1.err
    echo "vulkan $v c$1 s$2 rc $? $(el): $(grep -o '"ppl": [0-9.]*' /tmp/vk/${v}_c$1.json) $(grep -o '"seconds": [0-9.]*' /tmp/vk/${v}_c$1.json) $(head -c 300 /tmp/vk/${v}_c$1.err | head -2)" >> $S
  done
done
tar czf $OUT/vk.tar.gz -C /tmp vk
timeout 330 python3 $T/qat_numerics.py --dir $M --out $OUT --threads 6 > $OUT/numerics_log.txt 2>&1; echo "numerics rc $? $(el)" >> $S
wait $P1 $P2
sha256sum /tmp/rerun/tokenizer.json $M/tokenizer.json >> $S
cp /tmp/seed2.log /tmp/seed2/train_log.txt 2>/dev/null
tar czf $OUT/rerun.tar.gz -C /tmp rerun/train_meta.json rerun/goldens.json seed2/train_meta.json seed2/train_log.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> $S
cat $S
