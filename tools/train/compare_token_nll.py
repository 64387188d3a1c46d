#!/usr/bin/env python3
"""Per-token comparison of perplexity runs: transformers' (qat_numerics.py's qat_numerics.json) and
the engine's (`gemma-engine perplexity --json --per-token` reports). Pure Python (no numpy).

For every pair of runs of one checkpoint and window setting it prints the perplexity ratio, the rms
and largest per-token NLL difference, how many tokens differ by more than 1e-3 nats, and how
concentrated the difference is (the share of the summed |difference| carried by the 10 tokens
that differ most).

usage: python3 tools/train/compare_token_nll.py qat_numerics.json [NAME=ENGINE_REPORT.json ...]
  NAME is "<checkpoint>/<label>/c<context>s<stride>", e.g. qat/engine-cpu-ref/c256s255
"""
import itertools
import json
import math
import sys


def stats(a, b):
    d = [x - y for x, y in zip(a, b)]
    n = len(d)
    mass = sum(abs(x) for x in d)
    top = sorted((abs(x) for x in d), reverse=True)[:10]
    return {
        "ppl_rel": math.exp(sum(a) / n) / math.exp(sum(b) / n) - 1,
        "rms": math.sqrt(sum(x * x for x in d) / n),
        "max": max(abs(x) for x in d),
        "over_1e-3": sum(abs(x) > 1e-3 for x in d),
        "top10_share": sum(top) / mass if mass else float("nan"),
    }


def main():
    ref = json.load(open(sys.argv[1]))
    runs = {}
    for key, r in ref["runs"].items():
        name, dev, dt, setting = key.split("/")
        runs.setdefault((name, setting), {})[f"hf-{dev}-{dt}"] = r["token_nll"]
    for arg in sys.argv[2:]:
        label, path = arg.split("=", 1)
        name, who, setting = label.split("/")
        runs.setdefault((name, setting), {})[who] = json.load(open(path))["token_nll"]
    for (name, setting), group in sorted(runs.items()):
        n = len(next(iter(group.values())))
        print(f"\n== {name} {setting} ({n} tokens)")
        for who, nll in group.items():
            print(f"  {who:22s} ppl {math.exp(sum(nll) / len(nll)):.4f}")
        print(f"  {'pair':46s} {'ppl rel':>9s} {'rms':>8s} {'max':>7s} {'>1e-3':>6s} {'top10':>6s}")
        for (wa, a), (wb, b) in itertools.combinations(group.items(), 2):
            if len(a) != len(b):
                print(f"  {wa} vs {wb}: lengths differ ({len(a)}, {len(b)})")
                continue
            s = stats(a, b)
            print(f"  {wa + ' vs ' + wb:46s} {s['ppl_rel'] * 100:+8.3f}% {s['rms']:8.4f} {s['max']:7.3f} "
                  f"{s['over_1e-3']:6d} {s['top10_share']:6.2f}")


if __name__ == "__main__":
    main()
