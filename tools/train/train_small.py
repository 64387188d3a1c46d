#!/usr/bin/env python3
"""Trains models/tiny-trained: a small Gemma 4 text model (PLE, sliding/full layers, KV sharing, two head
dims, final softcap, tied head) on English prose from Debian packages (tools/train/build_corpus.py), then
its mobile-QAT variant, and takes transformers (float32) goldens for the engine's tests.

Runs on the GPU machine (torch 2.11, transformers 5.17, tokenizers; no network). Seeded; every phase has a
fixed step count (a wall-clock guard only stops a phase early if the machine is far slower than planned, and
the run records that). Steps:
  1. BPE tokenizer.json (tokenizers), Gemma 4 layout: the Gemma 4 special tokens at their Gemma 4 ids
     (0..106, the ids the engine's constraints and chat code use), the 7 multimodal markers at 107..113,
     <0x00>..<0xFF> byte fallback at 114..369, then the learned pieces. Normalizer, decoder and (null)
     pre-tokenizer exactly as Gemma's, so HF tokenizers and the engine's tokenizer agree.
  2. Pretraining on packed 512-token windows (<bos> + text), AdamW, cosine schedule, bf16 autocast.
  3. Instruction phase: template-generated Q/A pairs from the corpus rendered in the Gemma 4 chat format
     (checked against the canonical template through transformers), loss on the model turn only, mixed
     with pretraining batches.
  4. bf16 checkpoint saved; reloaded with from_pretrained for goldens.
  5. Mobile QAT: a short quantization-aware fine-tune (straight-through fake quantization with the
     published E2B mobile rules: int2/int4/int8 per-row, PLE table int4 per (row, layer)), export of the
     packed layout + SRQ activation scales calibrated on training text, loaded back through
     transformers' GemmaQuantizer (quant_method "gemma"), which must replace the layers.
  6. Goldens (float32, eager attention, CPU): held-out perplexity on fixed windows (the engine's
     `perplexity` algorithm) and 32-token greedy continuations of 10 prompts, for both variants.

usage: python3 tools/train/train_small.py --data DIR --template CHAT_TEMPLATE --out OUTDIR
  DIR holds corpus_train.txt, corpus_heldout.txt, corpus_sources.json (build_corpus.py)
"""
import argparse
import hashlib
import json
import math
import os
import random
import re
import sys
import time
import traceback

import numpy as np
import torch
import torch.nn.functional as F

T0 = time.time()
SEED = 42424242
S, FULL = "sliding_attention", "full_attention"
VOCAB = 4096
SEQ = 512
SFT_SEQ = 256

MODEL_CONFIG = dict(
    vocab_size=VOCAB, hidden_size=256, intermediate_size=320, num_hidden_layers=6,
    num_attention_heads=4, num_key_value_heads=1, head_dim=64, global_head_dim=128,
    layer_types=[S, S, FULL, S, S, FULL], sliding_window=64, num_kv_shared_layers=2,
    use_double_wide_mlp=True, hidden_size_per_layer_input=32, vocab_size_per_layer_input=VOCAB,
    final_logit_softcapping=30.0, tie_word_embeddings=True, max_position_embeddings=2048,
    bos_token_id=2, eos_token_id=[1, 106], pad_token_id=0)

# Gemma 4 special tokens at their Gemma 4 ids (src/tokenizer/gemma4_vocab.h, docs/gemma4-spec.md 5).
SPECIAL_AT = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>",
              46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>",
              50: "<|tool_response>", 51: "<tool_response|>", 52: '<|"|>', 98: "<|think|>",
              100: "<|channel>", 101: "<channel|>", 105: "<|turn>", 106: "<turn|>"}
# Multimodal markers: Gemma 4 has them at ids >= 255999, outside a small vocabulary; kept (same strings) so
# the chat template's image/audio/video placeholders tokenize as single special tokens.
MULTIMODAL = ["<|image>", "<image|>", "<|audio>", "<audio|>", "<|image|>", "<|audio|>", "<|video|>"]
N_RESERVED = 107 + len(MULTIMODAL)  # 114
BYTE_BASE = N_RESERVED

# The published E2B mobile QAT rules, for Gemma4ForCausalLM module names (as tools/fixtures/model_goldens.py).
QAT_RULES = {
    "^lm_head$": {"num_bits": 2},
    r"model\.embed_tokens$": {"num_bits": 2},
    r"model\.embed_tokens_per_layer$": {"num_bits": 4},
    r"model\.layers\.[0-3]\.mlp\.": {"num_bits": 4},
    r"model\.layers\.\d+\.mlp\.": {"num_bits": 2},
    r"model\.layers\.\d+\.per_layer_input_gate$": {"num_bits": 8},
    r"model\.layers\.\d+\.per_layer_projection$": {"num_bits": 8},
    r"model\.layers\.\d+\.self_attn\.": {"num_bits": 4},
}
QAT_NOT_CONVERT = ["per_layer_model_projection"]

PROMPTS = [  # (kind, content): text prompts get <bos> + text; chat prompts are one user turn.
    ("text", "The Debian project"),
    ("text", "A package is"),
    ("text", "To install a new program, you"),
    ("text", "Python is a programming language that"),
    ("text", "The kernel"),
    ("chat", "Hello! Who are you?"),
    ("chat", "What is Debian?"),
    ("chat", "Tell me about packages."),
    ("chat", "What is a file system?"),
    ("chat", "Complete this sentence: The security of a system"),
]
GREEDY_NEW = 32
PPL_SETTINGS = [  # (context, stride, chunks or None) on the held-out sample; chunks limit the windows
    (128, 64, 4), (128, 64, None), (256, 255, None)]


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ----------------------------------------------------------------------------------------------- tokenizer
def train_tokenizer(train_text_path):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    specials = [SPECIAL_AT.get(i, f"<unused{i}>") for i in range(107)] + MULTIMODAL
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    # Training only: words start at '▁', digits and punctuation stand alone. The shipped tokenizer has no
    # pre-tokenizer (as Gemma's): no learned merge crosses these boundaries, so BPE over a whole span
    # reproduces the pieces.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("\u2581", "merged_with_next"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Punctuation("isolated")])
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 256, special_tokens=specials, limit_alphabet=160,
                                  show_progress=False)
    tok.train([train_text_path], trainer)
    j = json.loads(tok.to_str())
    learned = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {}
    for i, s in enumerate(specials):
        vocab[s] = i
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = BYTE_BASE + b
    for piece, _ in learned:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    assert len(vocab) <= VOCAB, len(vocab)
    # Pad with unused specials if the trainer stopped short (never expected on a few MB of text).
    while len(vocab) < VOCAB:
        vocab[f"<unused{len(vocab)}>"] = len(vocab)
    merges = j["model"]["merges"]
    merges = [m if isinstance(m, list) else m.split(" ") for m in merges]
    out = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for s in specials] +
                        [{"id": vocab[s], "content": s, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}
                         for s in sorted(vocab, key=vocab.get) if s.startswith("<unused") and vocab[s] >= 370],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True,
                  "ignore_merges": False, "vocab": vocab, "merges": merges},
    }
    text = json.dumps(out, ensure_ascii=False, indent=None, separators=(",", ":"))
    final = Tokenizer.from_str(text)
    for i, s in SPECIAL_AT.items():
        assert final.token_to_id(s) == i, (s, i, final.token_to_id(s))
    return text, final


# ---------------------------------------------------------------------------------------------------- data
def read_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in f.read().split("\n\n") if d.strip()]


def encode_stream(tok, docs):
    """One token stream: documents joined with blank lines, encoded paragraph by paragraph (batched)."""
    paras = []
    for d in docs:
        for p in d.split("\n"):
            paras.append(p + "\n")
        paras.append("\n")
    enc = tok.encode_batch(paras, add_special_tokens=False)
    ids = [i for e in enc for i in e.ids]
    return np.array(ids, dtype=np.int64)


SENT_RE = re.compile(r"(.+?[.!?])(\s|$)")


def first_sentence(p):
    m = SENT_RE.match(p)
    return m.group(1) if m else p


def make_qa(docs, rng):
    greetings = ["Hello! Who are you?", "Hi!", "Hello.", "Who are you?", "What can you do?",
                 "Hi, what are you?", "Good morning!", "Can you help me?", "Hey there!"]
    replies = [
        "Hello! I am a small language model trained on Debian documentation. I can answer short "
        "questions about Debian, Python and free software in plain English.",
        "I am a tiny Gemma-style model that learned English from the books and manuals shipped in Debian "
        "packages. Ask me about packages, the system or programming.",
        "Hi! I am a small model. I know a little about Debian, Linux systems and Python, and I try to "
        "answer in simple sentences.",
    ]
    convs = []
    for _ in range(1500):
        convs.append((rng.choice(greetings), rng.choice(replies)))
    paras = [p for d in docs for p in d.split("\n") if 60 <= len(p) <= 600]
    what_re = re.compile(r"^((?:The |A |An )?[A-Z][\w\-]*(?: [\w\-]+){0,3}) (is|are|was|means) (.+?[.!?])(\s|$)")
    for p in paras:
        m = what_re.match(p)
        if m:
            subj = m.group(1)
            q = rng.choice(["What is {}?", "What is {}?", "Can you explain {}?", "Tell me what {} is."])
            if m.group(2) == "are":
                q = rng.choice(["What are {}?", "Tell me about {}."])
            subj_q = subj[0].lower() + subj[1:] if subj.split()[0] in ("The", "A", "An") else subj
            convs.append((q.format(subj_q), first_sentence(p) if len(first_sentence(p)) > 30 else p))
            if rng.random() < 0.15:
                convs.append((f"Describe {subj_q} as JSON with a name and a summary.",
                              json.dumps({"name": subj, "summary": first_sentence(p)}, ensure_ascii=False)))
    words_re = re.compile(r"\b([A-Z][a-z]{3,}|[a-z]{6,})\b")
    for p in rng.sample(paras, min(len(paras), 12000)):
        sent = first_sentence(p)
        r = rng.random()
        if r < 0.35:
            ws = words_re.findall(sent)
            if ws:
                topic = rng.choice(ws)
                convs.append((rng.choice(["Tell me about {}.", "What do you know about {}?",
                                          "Say something about {}."]).format(topic),
                              " ".join(SENT_RE.findall(p + " ")[i][0] for i in range(
                                  min(2, len(SENT_RE.findall(p + " "))))) or sent))
        elif r < 0.65:
            words = sent.split()
            if len(words) >= 8:
                k = len(words) // 2
                convs.append(("Complete this sentence: " + " ".join(words[:k]), sent))
        elif r < 0.85:
            convs.append(("Summarize this: " + p, sent))
        else:
            convs.append(("Repeat after me: " + sent, sent))
    rng.shuffle(convs)
    return convs


def render_chat(q, a=None):
    s = "<bos><|turn>user\n" + q + "<turn|>\n<|turn>model\n"
    return s if a is None else s + a + "<turn|>\n"


def check_template(template):
    """The hand-written chat format must equal the canonical template rendered by transformers."""
    try:
        from transformers.utils.chat_template_utils import render_jinja_template
        msgs = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}]
        def render(conv, gen):
            try:
                return render_jinja_template(conversations=[conv], chat_template=template,
                                             add_generation_prompt=gen, bos_token="<bos>")
            except TypeError:
                return render_jinja_template(conversations=[conv], chat_template=template,
                                             add_generation_prompt=gen)

        out = render(msgs, False)
        got = out[0] if isinstance(out, tuple) else out
        got = got[0] if isinstance(got, list) else got
        want = render_chat("Q1", "A1")
        gen = render(msgs[:1], True)
        g = gen[0] if isinstance(gen, tuple) else gen
        g = g[0] if isinstance(g, list) else g
        log("template check:", got == want, repr(got), "| gen prompt:", g == render_chat("Q1"), repr(g))
        return got == want and g == render_chat("Q1")
    except Exception as e:  # noqa: BLE001 - recorded, the hand format is the documented one
        log("template check failed to run:", type(e).__name__, e)
        return None


# ------------------------------------------------------------------------------------------- QAT helpers
def qat_bits(name):
    best = None
    for i, (pat, v) in enumerate(QAT_RULES.items()):
        m = re.search(pat, name)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), i, v)
    return 4 if best is None else best[2]["num_bits"]


def quant_scale(w, bits, blocks=1):
    """Per-(row, block) scale: the grid point (x amax/qmax) that minimizes the squared rounding error."""
    rows, cols = w.shape
    wb = w.detach().float().reshape(rows, blocks, cols // blocks)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    amax = wb.abs().amax(-1, keepdim=True).clamp_min(1e-8)
    if bits == 8:
        return amax / hi
    best, best_err = None, None
    for f in (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0):
        s = amax * f / max(hi, 1)
        q = torch.clamp(torch.round(wb / s), lo, hi) * s
        err = ((q - wb) ** 2).sum(-1, keepdim=True)
        if best is None:
            best, best_err = s, err
        else:
            better = err < best_err
            best = torch.where(better, s, best)
            best_err = torch.where(better, err, best_err)
    return best  # [rows, blocks, 1]


def quantize(w, bits, blocks=1):
    rows, cols = w.shape
    s = quant_scale(w, bits, blocks)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    q = torch.clamp(torch.round(w.detach().float().reshape(rows, blocks, -1) / s), lo, hi)
    return q.reshape(rows, cols).to(torch.int32), s.reshape(rows, blocks)


class FakeQuant(torch.nn.Module):
    def __init__(self, bits, blocks=1):
        super().__init__()
        self.bits, self.blocks = bits, blocks

    def forward(self, w):
        q, s = quantize(w, self.bits, self.blocks)
        deq = (q.float().reshape(w.shape[0], self.blocks, -1) * s.unsqueeze(-1)).reshape(w.shape).to(w.dtype)
        return w + (deq - w).detach()


def qat_targets(model):
    """(module name, module, bits, blocks) for every layer the mobile rules quantize."""
    out = []
    for name, mod in model.named_modules():
        if any(x in name for x in QAT_NOT_CONVERT):
            continue
        if isinstance(mod, torch.nn.Embedding):
            blocks = model.config.num_hidden_layers if name.endswith("embed_tokens_per_layer") else 1
            out.append((name, mod, qat_bits(name), blocks))
        elif isinstance(mod, torch.nn.Linear):
            out.append((name, mod, qat_bits(name), 1))
    return out


def pack(vals, bits):
    """vals: int tensor [rows, n] in [-2^(b-1), 2^(b-1)). Offset binary, LSB first (GemmaQuantizer's)."""
    if bits == 8:
        return vals.to(torch.int8)
    per = 8 // bits
    u = (vals + (1 << (bits - 1))).to(torch.int32)
    rows, n = u.shape
    pad = (-n) % per
    if pad:
        u = torch.cat([u, torch.zeros(rows, pad, dtype=torch.int32)], dim=1)
    u = u.view(rows, -1, per)
    packed = torch.zeros(rows, u.shape[1], dtype=torch.int32)
    for j in range(per):
        packed |= u[:, :, j] << (bits * j)
    return packed.to(torch.uint8)


# ------------------------------------------------------------------------------------------------ goldens
def perplexity(model, ids, context, stride, chunks, bos=2, device="cpu"):
    """The engine's algorithm: window k = <bos> + ids[k*stride : k*stride + context - 1]; each token is
    scored once, in the first window that contains it after the previous window's end."""
    n = len(ids)
    w = context - 1
    prev_end, begin, k = 0, 0, 0
    nll, count = 0.0, 0
    per_window = []
    while True:
        end = min(begin + w, n)
        window = torch.tensor([[bos] + list(ids[begin:end])], device=device)
        with torch.no_grad():
            logits = model(window, use_cache=False).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        tgt = torch.tensor(ids[prev_end:end], device=device)
        pos = torch.arange(prev_end - begin, end - begin, device=device)
        s = -lp[pos, tgt].sum().item()
        nll += s
        count += end - prev_end
        per_window.append(s)
        prev_end = end
        k += 1
        if end == n or (chunks is not None and k >= chunks):
            break
        begin += stride
    return {"context": context, "stride": stride, "chunks": chunks, "windows": k, "tokens_scored": count,
            "nll_sum": nll, "nll_mean": nll / count, "ppl": math.exp(nll / count), "window_nll": per_window}


def greedy(model, prompts_ids):
    out = []
    for p in prompts_ids:
        with torch.no_grad():
            g = model.generate(torch.tensor([p]), max_new_tokens=GREEDY_NEW, min_new_tokens=GREEDY_NEW,
                               do_sample=False, pad_token_id=0, eos_token_id=None)
        cont = g[0, len(p):].tolist()
        # Smallest top-1 / top-2 logit gap along the continuation: how close greedy came to a tie.
        with torch.no_grad():
            logits = model(torch.tensor([p + cont[:-1]]), use_cache=False).logits[0, len(p) - 1:].float()
        top2 = logits.topk(2, -1).values
        out.append({"ids": cont, "min_top2_gap": float((top2[:, 0] - top2[:, 1]).min()),
                    "argmax_agrees": logits.argmax(-1).tolist() == cont})
    return out


def load_float32(path):
    from transformers import Gemma4ForCausalLM
    model, info = Gemma4ForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager",
                                                    output_loading_info=True)
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    return model.eval(), bad


# ------------------------------------------------------------------------------------------------- main
def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def lm_loss(model, x, mask=None):
    logits = model(x[:, :-1], use_cache=False).logits.float()
    tgt = x[:, 1:]
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), reduction="none")
    if mask is None:
        return loss.mean()
    m = mask[:, 1:].reshape(-1).float()
    return (loss * m).sum() / m.sum().clamp_min(1)


def main():
    global SEED
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--template", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pretrain-steps", type=int, default=2500)
    ap.add_argument("--sft-steps", type=int, default=500)
    ap.add_argument("--qat-steps", type=int, default=500)
    # Wall-clock guards (the device lease is short); a phase cut short is recorded in train_meta.json.
    ap.add_argument("--budget-s", type=float, default=400, help="guard for all training")
    ap.add_argument("--pretrain-max-s", type=float, default=200)
    ap.add_argument("--sft-max-s", type=float, default=60)
    ap.add_argument("--qat-max-s", type=float, default=70)
    ap.add_argument("--seed", type=int, default=SEED, help="the shipped model's is the default")
    ap.add_argument("--no-goldens", action="store_true", help="stop after the checkpoints (seed studies)")
    args = ap.parse_args()
    SEED = args.seed
    os.makedirs(args.out, exist_ok=True)
    import tokenizers
    import transformers
    from transformers import Gemma4ForCausalLM, Gemma4TextConfig

    random.seed(SEED)
    np.random.seed(SEED)
    torch.manual_seed(SEED)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    meta = {"seed": SEED, "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                       "tokenizers": tokenizers.__version__, "python": sys.version.split()[0]},
            "device": torch.cuda.get_device_name(0) if dev == "cuda" else "cpu", "config": MODEL_CONFIG}
    train_path = os.path.join(args.data, "corpus_train.txt")
    held_path = os.path.join(args.data, "corpus_heldout.txt")
    meta["data"] = {"corpus_train.txt": sha256_file(train_path), "corpus_heldout.txt": sha256_file(held_path)}
    try:
        with open(os.path.join(args.data, "corpus_sources.json")) as f:
            meta["sources"] = json.load(f)
    except OSError:
        pass
    template = open(args.template).read()
    meta["template_matches_hand_format"] = check_template(template)

    # 1. tokenizer
    tok_text, tok = train_tokenizer(train_path)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok_text)
    log("tokenizer: vocab", tok.get_vocab_size(), "sha256", hashlib.sha256(tok_text.encode()).hexdigest()[:16])
    sample = "Hello world! The Debian project, in 2024, ships 59000 packages: naïve café “quotes”."
    back = tok.decode(tok.encode(sample).ids, skip_special_tokens=False)
    if back != sample:
        log("WARNING: tokenizer round trip differs:", repr(back))
    log("sample:", tok.encode(sample).tokens)

    # 2. data
    train_docs, held_docs = read_docs(train_path), read_docs(held_path)
    stream = encode_stream(tok, train_docs)
    held_stream = encode_stream(tok, held_docs)
    meta["train_tokens"], meta["heldout_tokens"] = int(len(stream)), int(len(held_stream))
    log(f"train tokens {len(stream)} ({os.path.getsize(train_path) / len(stream):.2f} bytes/token), "
        f"held-out {len(held_stream)}")
    rng = random.Random(SEED)
    convs = make_qa(train_docs, rng)
    meta["qa_pairs"] = len(convs)
    meta["qa_examples"] = convs[:8]
    log("qa pairs", len(convs), convs[:3])

    gen = torch.Generator().manual_seed(SEED)

    def pretrain_batch(bs):
        offs = torch.randint(0, len(stream) - SEQ, (bs,), generator=gen).numpy()
        x = np.stack([np.concatenate([[2], stream[o:o + SEQ - 1]]) for o in offs])
        return torch.from_numpy(x).to(dev)

    sft_enc = []
    for q, a in convs:
        ids = tok.encode(render_chat(q, a), add_special_tokens=False).ids[:SFT_SEQ]
        if ids.count(105) < 2:
            continue  # the model turn was cut off
        # Loss on the model turn: everything after the last <|turn> (its "model\n" header included).
        start = max(i for i, t in enumerate(ids) if t == 105) + 1
        sft_enc.append((ids, start))

    def sft_batch(bs):
        idx = torch.randint(0, len(sft_enc), (bs,), generator=gen).tolist()
        x = torch.zeros(bs, SFT_SEQ, dtype=torch.long)
        m = torch.zeros(bs, SFT_SEQ, dtype=torch.long)
        for r, i in enumerate(idx):
            ids, start = sft_enc[i]
            x[r, :len(ids)] = torch.tensor(ids)
            m[r, start:len(ids)] = 1
        return x.to(dev), m.to(dev)

    def held_loss(model, n=16):
        g = torch.Generator().manual_seed(7)
        offs = torch.randint(0, len(held_stream) - SEQ, (n,), generator=g).numpy()
        x = torch.from_numpy(np.stack([np.concatenate([[2], held_stream[o:o + SEQ - 1]]) for o in offs])).to(dev)
        model.eval()
        with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            l = lm_loss(model, x).item()
        model.train()
        return l

    cfg = Gemma4TextConfig(**MODEL_CONFIG)
    model = Gemma4ForCausalLM(cfg)
    try:
        model.config._attn_implementation = "sdpa"
    except Exception as e:  # noqa: BLE001 - the default implementation is fine, only slower
        log("sdpa not set:", e)
    nparams = sum(p.numel() for p in model.parameters())
    meta["parameters"] = nparams
    log("parameters", nparams)
    model.to(dev).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    curve = []
    budget_end = T0 + args.budget_s
    phases = {}

    def run_phase(name, steps, peak, step_fn, warmup, max_s):
        t = time.time()
        ema = None
        done = 0
        for step in range(steps):
            for g_ in opt.param_groups:
                g_["lr"] = lr_at(step, steps, peak, warmup)
            with torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
                loss = step_fn(step)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            lv = loss.item() if step % 25 == 0 or step == steps - 1 else None
            if lv is not None:
                ema = lv if ema is None else 0.7 * ema + 0.3 * lv
            done = step + 1
            if step % 250 == 0 or step == steps - 1:
                hl = held_loss(model)
                curve.append({"phase": name, "step": step, "train_loss": lv, "heldout_loss": hl})
                log(f"{name} step {step}/{steps} loss {lv:.4f} held-out {hl:.4f} "
                    f"({(time.time() - t) / (step + 1) * 1000:.1f} ms/step)")
            if time.time() > min(budget_end, t + max_s):
                log(f"{name}: wall-clock guard hit at step {step + 1}/{steps}")
                break
        phases[name] = {"steps_planned": steps, "steps_done": done, "seconds": time.time() - t,
                        "final_train_loss_ema": ema}

    run_phase("pretrain", args.pretrain_steps, 3e-3, lambda s: lm_loss(model, pretrain_batch(16)), 150,
              args.pretrain_max_s)

    def sft_step(s):
        if s % 2 == 0:
            x, m = sft_batch(32)
            return lm_loss(model, x, m)
        return lm_loss(model, pretrain_batch(16))

    run_phase("sft", args.sft_steps, 1e-3, sft_step, 30, args.sft_max_s)
    meta["phases"] = phases
    meta["curve"] = curve

    def eval_losses(m):
        xs, ms = [], []
        g = torch.Generator().manual_seed(11)
        for _ in range(4):
            idx = torch.randint(0, len(sft_enc), (32,), generator=g).tolist()
            x = torch.zeros(32, SFT_SEQ, dtype=torch.long)
            mk = torch.zeros(32, SFT_SEQ, dtype=torch.long)
            for r, i in enumerate(idx):
                ids, start = sft_enc[i]
                x[r, :len(ids)] = torch.tensor(ids)
                mk[r, start:len(ids)] = 1
            xs.append(x.to(dev))
            ms.append(mk.to(dev))
        m.eval()
        with torch.no_grad(), torch.autocast(dev, dtype=torch.bfloat16, enabled=dev == "cuda"):
            sft = sum(lm_loss(m, x, mk).item() for x, mk in zip(xs, ms)) / len(xs)
        m.train()
        return {"heldout_loss": held_loss(m, 64), "answer_loss": sft}

    meta["final_bf16_losses"] = eval_losses(model)
    log("final losses", meta["final_bf16_losses"])

    # 4. save bf16
    bf_dir = os.path.join(args.out, "bf16")
    os.makedirs(bf_dir, exist_ok=True)
    from safetensors.torch import save_file
    sd = {k: (v.float() if k.endswith("layer_scalar") else v.to(torch.bfloat16)).contiguous().cpu()
          for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(sd, os.path.join(bf_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg.save_pretrained(bf_dir)
    log("saved bf16", os.path.getsize(os.path.join(bf_dir, "model.safetensors")))
    write_meta(args.out, meta)

    # 5. QAT
    qat_dir = os.path.join(args.out, "qat")
    try:
        make_qat(model, cfg, opt, run_phase, pretrain_batch, sft_batch, args, qat_dir, stream, meta, eval_losses)
    except Exception:  # noqa: BLE001 - the bf16 artifacts and goldens still come back
        meta["qat_error"] = traceback.format_exc()
        log("QAT FAILED\n" + meta["qat_error"])
    write_meta(args.out, meta)

    if args.no_goldens:
        meta["total_seconds"] = time.time() - T0
        write_meta(args.out, meta)
        log("done (no goldens)")
        return
    # 6. goldens (CPU float32 eager, from the reloaded checkpoints)
    held_sample = held_text_sample(held_docs)
    torch.set_num_threads(min(16, os.cpu_count() or 1))
    goldens = {"tokenizer_sha256": hashlib.sha256(tok_text.encode()).hexdigest(),
               "heldout_sample_sha256": hashlib.sha256(held_sample.encode()).hexdigest(),
               "transformers": transformers.__version__, "torch": torch.__version__,
               "greedy_new_tokens": GREEDY_NEW, "prompts": []}
    sample_ids = tok.encode(held_sample, add_special_tokens=False).ids
    goldens["heldout_sample_tokens"] = len(sample_ids)
    prompt_ids = []
    for kind, content in PROMPTS:
        text = ("<bos>" + content) if kind == "text" else render_chat(content)
        ids = tok.encode(text, add_special_tokens=False).ids
        prompt_ids.append(ids)
        goldens["prompts"].append({"kind": kind, "content": content, "rendered": text, "ids": ids})
    for variant, path in (("bf16", bf_dir), ("qat", qat_dir)):
        if not os.path.exists(os.path.join(path, "model.safetensors")):
            continue
        try:
            m, bad = load_float32(path)
            if bad:
                raise RuntimeError(f"{variant}: not loaded cleanly: {bad}")
            if variant == "qat":
                from transformers.integrations.gemma_quant import QuantizedEmbedding, QuantizedLinear
                kinds = {}
                for n_, mod in m.named_modules():
                    if isinstance(mod, (QuantizedLinear, QuantizedEmbedding)):
                        kinds[n_] = f"{type(mod).__name__}/int{mod.num_bits}"
                assert any(isinstance(x, QuantizedLinear) for x in m.modules()), "GemmaQuantizer did not run"
                goldens["qat_quantized_modules"] = kinds
            g = {"perplexity": [perplexity(m, sample_ids, c, s, k) for c, s, k in PPL_SETTINGS]}
            log(variant, "ppl", [(x["context"], x["stride"], x["chunks"], round(x["ppl"], 4)) for x in g["perplexity"]])
            g["greedy"] = greedy(m, prompt_ids)
            for p, r in zip(PROMPTS, g["greedy"]):
                r["text"] = tok.decode(r["ids"], skip_special_tokens=False)
                log(variant, repr(p[1]), "->", repr(r["text"]), f"gap {r['min_top2_gap']:.3f}")
            goldens[variant] = g
            # Whole held-out split, for the model card (GPU float32, no TF32).
            mg = m.to(dev)
            full = perplexity(mg, list(held_stream[:60000]), 512, 256, None, device=dev)
            full.pop("window_nll")
            meta.setdefault("heldout_full", {})[variant] = full
            log(variant, "held-out (first 60k tokens, ctx 512 stride 256) ppl", full["ppl"])
            del mg, m
        except Exception:  # noqa: BLE001
            goldens[variant + "_error"] = traceback.format_exc()
            log(variant, "GOLDENS FAILED\n" + goldens[variant + "_error"])
    with open(os.path.join(args.out, "goldens.json"), "w") as f:
        json.dump(goldens, f, indent=1)
    meta["total_seconds"] = time.time() - T0
    write_meta(args.out, meta)
    log("done")


def held_text_sample(held_docs, limit=12000):
    """The first ~12 KB of the held-out split, cut at a paragraph end."""
    text = "\n\n".join(held_docs)
    cut = text.rfind("\n", 0, limit)
    return text[:cut + 1]


def write_meta(out, meta):
    with open(os.path.join(out, "train_meta.json"), "w") as f:
        json.dump(meta, f, indent=1, default=str)


def make_qat(model, cfg, opt, run_phase, pretrain_batch, sft_batch, args, qat_dir, stream, meta, eval_losses):
    import torch.nn.utils.parametrize as P
    from safetensors.torch import save_file
    from transformers import Gemma4ForCausalLM
    os.makedirs(qat_dir, exist_ok=True)
    # The QAT layout has its own int2 lm_head (tied values, quantized per vocab row like the embedding).
    model.lm_head.weight = model.model.embed_tokens.weight
    targets = qat_targets(model)
    if not any(n == "lm_head" for n, *_ in targets):
        raise RuntimeError("lm_head not among the QAT targets")
    for name, mod, bits, blocks in targets:
        P.register_parametrization(mod, "weight", FakeQuant(bits, blocks))
    meta["qat_targets"] = {n: f"int{b}" + (f" x{bl} blocks" if bl > 1 else "") for n, _, b, bl in targets}
    log("QAT targets", len(targets))

    def step(s):
        if s % 2 == 0:
            x, m = sft_batch(32)
            return lm_loss(model, x, m)
        return lm_loss(model, pretrain_batch(16))

    # Parametrization may re-home the weights: a fresh optimizer over the module's current parameters.
    opt.param_groups.clear()
    opt.state.clear()
    opt.add_param_group({"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": 0.0})
    run_phase("qat", args.qat_steps, 5e-4, step, 20, args.qat_max_s)
    meta["final_qat_fakequant_losses"] = eval_losses(model)
    log("QAT fake-quant losses", meta["final_qat_fakequant_losses"])
    # Export: integer values and scales from the same function the fake quantizer used.
    with torch.no_grad():
        float_sd = {}
        for k, v in model.state_dict().items():
            if ".parametrizations." in k:
                if k.endswith(".original"):
                    float_sd[k.replace(".parametrizations.weight.original", ".weight")] = v.detach().float().cpu()
                continue
            float_sd[k] = v.detach().float().cpu()
        float_sd["lm_head.weight"] = float_sd["model.embed_tokens.weight"]
        modules = {n: (b, bl, type(m)) for n, m, b, bl in targets}
        sd = {}
        for k, v in float_sd.items():
            mod_name, _, leaf = k.rpartition(".")
            if mod_name in modules and leaf == "weight":
                bits, blocks, typ = modules[mod_name]
                q, s = quantize(v, bits, blocks)
                if issubclass(typ, torch.nn.Embedding):
                    sd[mod_name + ".embedding_quantized"] = pack(q, bits)
                    sd[mod_name + ".embedding_scale"] = s.float().contiguous()
                else:
                    sd[k] = pack(q, bits)
                    sd[mod_name + ".weight_scale"] = s.float().contiguous()
                    sd[mod_name + ".input_activation_scale"] = torch.tensor(0.0)
                    sd[mod_name + ".output_activation_scale"] = torch.tensor(0.0)
            elif k.endswith("layer_scalar"):
                sd[k] = v.float()
            else:
                sd[k] = v.to(torch.bfloat16).contiguous()
    qcfg = {"quant_method": "gemma", "num_bits": 4, "quantize_embeddings": True,
            "module_quant_configs": QAT_RULES, "modules_to_not_convert": QAT_NOT_CONVERT}

    def save(sd_):
        save_file(sd_, os.path.join(qat_dir, "model.safetensors"), metadata={"format": "pt"})
        cfg.save_pretrained(qat_dir)  # the full config, as for bf16
        with open(os.path.join(qat_dir, "config.json")) as f:
            c = json.load(f)
        c["tie_word_embeddings"] = False
        c["quantization_config"] = qcfg
        with open(os.path.join(qat_dir, "config.json"), "w") as f:
            json.dump(c, f, indent=2, sort_keys=True)

    save(sd)
    uncal, bad = load_float32(qat_dir)
    if bad:
        raise RuntimeError(f"QAT checkpoint not loaded cleanly: {bad}")
    from transformers.integrations.gemma_quant import QuantizedLinear
    if not any(isinstance(m, QuantizedLinear) for m in uncal.modules()):
        raise RuntimeError("GemmaQuantizer did not replace the layers")
    # SRQ calibration: per-linear activation amax over training text -> int8 scales (amax / 127).
    amax = {}
    hooks = []
    for name, mod in uncal.named_modules():
        if isinstance(mod, QuantizedLinear):
            def hook(m, inp, out, name=name):
                a = amax.setdefault(name, [0.0, 0.0])
                a[0] = max(a[0], inp[0].abs().max().item())
                a[1] = max(a[1], out.abs().max().item())
            hooks.append(mod.register_forward_hook(hook))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for _ in range(8):
            o = int(torch.randint(0, len(stream) - 256, (1,), generator=g))
            uncal(torch.tensor([[2] + stream[o:o + 255].tolist()]), use_cache=False)
    for h in hooks:
        h.remove()
    for name, (ain, aout) in amax.items():
        sd[name + ".input_activation_scale"] = torch.tensor(np.float32(ain / 127.0))
        # The head's output stays uncalibrated (scale 0, a case the format allows): int8 logits would
        # make exact ties common, and greedy goldens must not hinge on tie-breaking.
        sd[name + ".output_activation_scale"] = torch.tensor(np.float32(0.0 if name == "lm_head" else aout / 127.0))
    save(sd)
    meta["qat_calibrated_linears"] = len(amax)
    log("saved QAT", os.path.getsize(os.path.join(qat_dir, "model.safetensors")))


if __name__ == "__main__":
    main()
