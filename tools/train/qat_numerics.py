#!/usr/bin/env python3
"""How far transformers' own perplexity of models/tiny-trained moves under numerics alone, per token.

The engine's QAT perplexity differs from transformers' float32 CPU golden by -0.15% (context 256,
stride 255); bf16 agrees to 2e-9. This script asks whether that is a semantic mismatch or the SRQ
noise floor, by scoring the held-out sample with the same windows as train_small.py's goldens (the
engine's `perplexity` algorithm) in transformers under:
  float32 and float64, on the CPU and on CUDA (TF32 off),
for three checkpoints:
  bf16       models/tiny-trained (no SRQ: the control; numerics should barely matter),
  qat        models/tiny-trained/qat as shipped (SRQ at every quantized linear's input and output),
  qat_nosrq  the same with every activation scale 0 (SRQ off, the format's uncalibrated case): the
             int2/int4/int8 weights, block scales and untied int2 head alone.
It records every scored token's NLL (to compare per position with `gemma-engine perplexity --json
--per-token`), and, for one window, how many SRQ roundings float32 decides differently from float64
given the same float64 inputs (teacher-forced, layer by layer): the reference's own rounding noise.

usage: python3 tools/train/qat_numerics.py --dir models/tiny-trained --out OUTDIR [--threads N]
writes OUTDIR/qat_numerics.json (per-token NLLs, 1.4 MB) and OUTDIR/goldens_numerics.json (the
compact goldens that tests/tiny_trained_test.cc reads: every run's perplexity, and the SRQ-off
checkpoint's per-window NLLs); --compact-from QAT_NUMERICS_JSON remakes only the latter.
"""
import argparse
import json
import math
import os
import shutil
import tempfile
import time
import traceback

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # --compact-from needs neither
    torch = F = None

T0 = time.time()
SETTINGS = [(256, 255), (128, 64)]


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def score(model, ids, context, stride, device, bos=2):
    """Per-token NLLs with train_small.perplexity's windows (every text token scored once)."""
    n, w = len(ids), context - 1
    prev_end, begin = 0, 0
    out = []
    while True:
        end = min(begin + w, n)
        window = torch.tensor([[bos] + list(ids[begin:end])], device=device)
        with torch.no_grad():
            logits = model(window, use_cache=False).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        tgt = torch.tensor(ids[prev_end:end], device=device)
        pos = torch.arange(prev_end - begin, end - begin, device=device)
        out.extend((-lp[pos, tgt]).tolist())
        prev_end = end
        if end == n:
            return out
        begin += stride


def flip_census(model, ids, context):
    """Teacher-forced SRQ rounding flips: run the float64 model on the first window; at every
    QuantizedLinear, round its float64 input/output and the same values computed in float32, and
    count the codes that differ."""
    from transformers.integrations.gemma_quant import QuantizedLinear, apply_srq
    stats = {"in_values": 0, "in_flips": 0, "out_values": 0, "out_flips": 0, "linears": 0}

    def hook(mod, inp, out):
        x = inp[0]
        s_in = mod.input_activation_scale.detach()
        s_out = mod.output_activation_scale.detach()
        stats["linears"] += 1
        if float(s_in) != 0:
            q64 = torch.round(x / s_in.double())
            q32 = torch.round(x.float() / s_in.float())
            stats["in_values"] += q64.numel()
            stats["in_flips"] += int((q64 != q32.double()).sum())
        if float(s_out) != 0:
            xq64 = apply_srq(x, s_in)
            xq32 = apply_srq(xq64.float(), s_in)  # same codes, float32 values and sums
            y64 = F.linear(xq64, mod._dequantize_weights(torch.float64))
            y32 = F.linear(xq32, mod._dequantize_weights(torch.float32))
            o64 = torch.round(y64 / s_out.double())
            o32 = torch.round(y32 / s_out.float())
            stats["out_values"] += o64.numel()
            stats["out_flips"] += int((o64 != o32.double()).sum())

    hooks = [m.register_forward_hook(hook) for m in model.modules() if isinstance(m, QuantizedLinear)]
    with torch.no_grad():
        model(torch.tensor([[2] + list(ids[:context - 1])]), use_cache=False)
    for h in hooks:
        h.remove()
    stats["window_tokens"] = context
    return stats


def window_sums(nll, context, stride):
    """Per-window NLL sums of score()'s windows, from its per-token NLLs."""
    n, out, prev_end, begin = len(nll), [], 0, 0
    while True:
        end = min(begin + context - 1, n)
        out.append(sum(nll[prev_end:end]))
        prev_end = end
        if end == n:
            return out
        begin += stride


def compact(res, out_dir):
    g = {"source": "tools/train/qat_numerics.py (transformers %s, torch %s), held-out sample, %d tokens"
                   % (res["transformers"], res["torch"], res["tokens"]),
         "ppl": {k: r["ppl"] for k, r in res["runs"].items()},
         "zeroed_scales": res["zeroed_scales"],
         "flip_census_c256": res.get("flip_census_c256"),
         "qat_nosrq_window_nll": {}}
    for c, s in SETTINGS:
        key = f"qat_nosrq/cpu/float32/c{c}s{s}"
        if key in res["runs"]:
            g["qat_nosrq_window_nll"][f"c{c}s{s}"] = window_sums(res["runs"][key]["token_nll"], c, s)
    with open(os.path.join(out_dir, "goldens_numerics.json"), "w") as f:
        json.dump(g, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=8)
    ap.add_argument("--compact-from", help="qat_numerics.json of an earlier run: write only goldens_numerics.json")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.compact_from:
        with open(args.compact_from) as f:
            compact(json.load(f), args.out)
        return
    torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import transformers
    from safetensors.torch import load_file, save_file
    from tokenizers import Tokenizer
    from transformers import Gemma4ForCausalLM

    tok = Tokenizer.from_file(os.path.join(args.dir, "tokenizer.json"))
    with open(os.path.join(args.dir, "heldout_sample.txt"), encoding="utf-8") as f:
        ids = tok.encode(f.read(), add_special_tokens=False).ids
    tmp = tempfile.mkdtemp()
    nosrq = os.path.join(tmp, "qat_nosrq")
    os.makedirs(nosrq)
    qat = os.path.join(args.dir, "qat")
    shutil.copy(os.path.join(qat, "config.json"), nosrq)
    sd = load_file(os.path.join(qat, "model.safetensors"))
    zeroed = [k for k in sd if k.endswith("_activation_scale")]
    for k in zeroed:
        sd[k] = torch.zeros_like(sd[k])
    save_file(sd, os.path.join(nosrq, "model.safetensors"), metadata={"format": "pt"})
    res = {"transformers": transformers.__version__, "torch": torch.__version__, "tokens": len(ids),
           "zeroed_scales": len(zeroed), "runs": {}}
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for name, path in (("bf16", args.dir), ("qat", qat), ("qat_nosrq", nosrq)):
        for dtype in (torch.float32, torch.float64):
            dt = str(dtype).replace("torch.", "")
            try:
                m = Gemma4ForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager").eval()
                if name == "qat" and dtype == torch.float64:
                    res["flip_census_c256"] = flip_census(m, ids, 256)
                    log("flip census", res["flip_census_c256"])
                for dev in devices:
                    m = m.to(dev)
                    for c, s in SETTINGS:
                        t = time.time()
                        nll = score(m, ids, c, s, dev)
                        key = f"{name}/{dev}/{dt}/c{c}s{s}"
                        ppl = math.exp(sum(nll) / len(nll))
                        res["runs"][key] = {"ppl": ppl, "token_nll": nll}
                        log(key, f"ppl {ppl:.4f} ({time.time() - t:.1f} s)")
                del m
            except Exception:  # noqa: BLE001 - the other runs still count
                res[f"{name}/{dt}_error"] = traceback.format_exc()
                log(name, dt, "FAILED\n" + res[f"{name}/{dt}_error"])
            with open(os.path.join(args.out, "qat_numerics.json"), "w") as f:
                json.dump(res, f)
    shutil.rmtree(tmp)
    with open(os.path.join(args.out, "qat_numerics.json"), "w") as f:
        json.dump(res, f)
    compact(res, args.out)
    log("done")


if __name__ == "__main__":
    main()
