// The WebGPU backend under Node: Dawn for Node (npm `webgpu`, a test asset) on SwiftShader's
// Vulkan driver (Debian's chromium ships it), the module's engine with backend "webgpu" against
// transformers' goldens (tests/goldens/model: logits at every position and greedy tokens) and
// against the module's own CPU reference (tokens and log-probs of constrained and sampled
// requests); then a device loss in the middle of a conversation. Skips without the build, the
// package or the driver.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { execFileSync } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import { createRequire } from 'node:module';
import { check, finish, host, loadModule, requireWebBuild, sourceDir, webDir } from './harness.mjs';

requireWebBuild();
const dawn = path.join(sourceDir, '.cache/npm-assets/node_modules/webgpu');
const icd = '/usr/lib/chromium/vk_swiftshader_icd.json';
for (const [p, what] of [[dawn, 'Dawn for Node (tools/setup.sh installs the test assets)'],
                         [icd, "SwiftShader's Vulkan driver (Debian's chromium)"]]) {
  if (!fs.existsSync(p)) {
    console.log(`SKIP: no ${what} at ${p}`);
    process.exit(77);
  }
}
process.env.VK_ICD_FILENAMES = icd;  // before Dawn loads the Vulkan loader
const webgpu = { module: dawn, flags: ['backend=vulkan'] };
const { loadEngine } = await import(pathToFileURL(path.join(webDir, 'lib/gemma-engine.mjs')).href);

function relL2(a, b) {
  let num = 0, den = 0;
  for (let i = 0; i < a.length; ++i) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] ** 2;
  }
  return Math.sqrt(num / Math.max(den, 1e-30));
}

// Without a GPU: "webgpu" is a clear error, "auto" runs on the CPU.
{
  const model = path.join(sourceDir, 'models/tiny-trained');
  let err = null;
  try {
    await loadEngine({ model, backend: 'webgpu' });
  } catch (e) {
    err = e;
  }
  check(err && err.code === 'unsupported' && /WebGPU/.test(err.message),
        `backend 'webgpu' without a GPU: ${err ? `${err.code}: ${err.message}` : 'loaded'}`);
  let bad = null;
  try {
    await loadEngine({ model, backend: 'webgpu', webgpu: { kernels: 'fast' } });
  } catch (e) {
    bad = e;
  }
  check(bad && bad.code === 'invalid_argument' && /kernels/.test(bad.message),
        `webgpu.kernels 'fast': ${bad ? `${bad.code}: ${bad.message}` : 'loaded'}`);
  let badSg = null;
  try {
    await loadEngine({ model, backend: 'webgpu', webgpu: { subgroups: 'no' } });
  } catch (e) {
    badSg = e;
  }
  check(badSg && badSg.code === 'invalid_argument' && /subgroups/.test(badSg.message),
        `webgpu.subgroups 'no': ${badSg ? `${badSg.code}: ${badSg.message}` : 'loaded'}`);
  const auto = await loadEngine({ model, backend: 'auto' });
  check(auto.info.backend !== 'webgpu' && auto.info.device === '', `auto without a GPU: ${auto.info.backend}`);
  console.log(`no GPU: webgpu refused (${err?.code}: ${err?.message}); auto ran on ${auto.info.backend}`);
  await auto.destroy();
}

// transformers' goldens: the logits at every position of prompt + greedy[:-1] (dense models: rel L2
// <= 1e-4 at every position; QAT: SRQ roundings may flip a quantum, so its tokens must be
// identical and its logits error is reported), and the greedy continuation. Three kernel
// configurations: the row kernels, the workgroup kernels with subgroup reductions (the default
// where the adapter has `subgroups`, as SwiftShader does) and without (webgpu.subgroups false).
// The row and subgroup ones run the logits of the f32-sensitive dense golden's longest prompt
// (without the continuation's positions) and 8 greedy tokens of the QAT golden's second prompt;
// the workgroup kernels without subgroups run in CI as the prompt kernels' run below
// (web_wgsl_kernels_test compares their kernels with the subgroup ones at every shape), and here
// with --all-kernels (webgpu.subgroups false, end to end). The row kernels (SwiftShader's
// default) run every golden's every prompt in headless Chromium (webgpu_browser_test.mjs), so not
// again here, and the workgroup kernels (GPUs' default) are ~25x slower on SwiftShader (a barrier
// is a coroutine switch per invocation). With --all-kernels (the GPU machine's script) every
// configuration runs every golden.
const goldenDir = path.join(sourceDir, 'tests/goldens/model');
const allKernels = process.argv.includes('--all-kernels');
const configs = [
  { kernels: 'rows', device: 'row kernels',
    subset: { tiny_e4b_like_f16: { prompt: 3, score: true }, tiny_qat: { prompt: 1, generate: true } } },
  { kernels: 'workgroup', device: 'workgroup kernels with subgroups',
    subset: { tiny_e4b_like_f16: { prompt: 3, score: true }, tiny_qat: { prompt: 1, generate: true } } },
  // (--all-kernels only: the prompt kernels' run below has the same reductions in CI, there
  // because the compiler refused the subgroup ones)
  { kernels: 'workgroup', subgroups: false, device: 'workgroup kernels', allOnly: true,
    subset: { tiny_qat: { prompt: 0, generate: true, tokens: 3 } } },
];
for (const { kernels, subgroups, device, subset, allOnly } of configs) {
  if (allOnly && !allKernels) continue;
  const label = subgroups === false ? `${kernels}, no subgroups` : kernels;
  for (const name of fs.readdirSync(goldenDir).sort()) {
    const dir = path.join(goldenDir, name);
    const g = JSON.parse(fs.readFileSync(path.join(dir, 'goldens.json'), 'utf8'));
    const full = allKernels;
    if (!full && !subset[name]) continue;
    const prompts = full ? g.prompts.map((_, i) => i) : [subset[name].prompt];
    const qat = g.storage === 'qat';
    const engine = await loadEngine({ model: dir, backend: 'webgpu', context: 1024,
                                      webgpu: { ...webgpu, kernels, subgroups } });
    check(engine.info.backend === 'webgpu', `${name}: backend ${engine.info.backend}`);
    check(engine.info.device.endsWith(`, ${device}`),
          `${name}: ${label} asked, device ${engine.info.device}`);
    const V = engine.info.vocab_size;
    let worst = 0;
    const what = full ? { score: true, generate: true } : subset[name];
    for (const i of prompts) {
      // Greedy decoding (the one-token path): every prompt of the QAT golden (its tokens are the
      // check), the shortest and the longest of the dense ones (their logits at every position
      // cover the rest); --all-kernels decodes every prompt.
      const decode = what.generate && (allKernels || qat || !full || i === 0 || i === g.prompts.length - 1);
      const greedy = full ? g.greedy[i] : g.greedy[i].slice(0, what.tokens ?? 8);
      const seq = full ? [...g.prompts[i], ...g.greedy[i].slice(0, -1)] : g.prompts[i];
      if (what.score) {
        const want = new Float32Array(fs.readFileSync(path.join(dir, `logits_${i}.f32`)).buffer.slice(0));
        const r = await engine.newSession().score(seq, { logits: true });
        r.logits = r.logits.flat();
        check(r.logits.length === seq.length * V, `${name} prompt ${i}: ${r.logits.length} logits`);
        for (let t = 0; t < seq.length; ++t) {
          const e = relL2(r.logits.slice(t * V, (t + 1) * V), want.subarray(t * V, (t + 1) * V));
          worst = Math.max(worst, e);
          if (!qat) check(e <= 1e-4, `${name} (${label}) prompt ${i} position ${t}: rel L2 ${e}`);
        }
      }
      if (decode) {
        const out = await engine.newSession().generate({ prompt: g.prompts[i] },
                                                       { max_tokens: greedy.length, temperature: 0, ignore_eos: true });
        check(JSON.stringify(out.tokens) === JSON.stringify(greedy),
              `${name} (${label}) prompt ${i}: greedy ${out.tokens} vs transformers ${greedy}`);
      }
    }
    console.log(`${name} (${engine.info.device.split(', ').pop()}): ${prompts.length} prompt(s), ${what.score ? `worst logits rel L2 ${worst.toExponential(2)} vs transformers` : 'logits not compared'}${qat || !what.score ? ', tokens compared' : ''}`);
    await engine.destroy();
  }
}

// The prompt kernels end to end (the goldens' windows of 5-8 keep their chunks below them): the
// trained tiny model (window 64, so chunks of 64 tokens) scores transformers' first perplexity
// window of its held-out sample (127 tokens: the second chunk's keys wrap the sliding ring) with
// the workgroup kernels: its attention takes attention_prompt_wg, its (bf16) linears
// linear_dense_tile_wg. Logits at every position within 1e-4 (rel L2) of the module's CPU
// reference, and the window's NLL within 1e-2 of transformers' (tests/tiny_trained_test.cc's
// bound). On an adapter that lists `subgroups` but whose compiler refuses the subgroup shaders
// (injected): the engine falls back to the workgroup reductions, says why, and compiles the
// prompt kernels (left for a chunk's first use) with those too. (The QAT checkpoint's split
// linear_tile_wg, exact integer sums, is checked bit for bit in web_wgsl_kernels_test;
// SwiftShader runs the workgroup kernels too slowly for CI to score it here as well: ~30 s.)
{
  const model = path.join(sourceDir, 'models/tiny-trained');
  const g = JSON.parse(fs.readFileSync(path.join(model, 'goldens.json'), 'utf8'));
  const want = g.bf16.perplexity.find((p) => p.context === 128 && p.stride === 64).window_nll[0];
  const gpu = await loadEngine({ model, backend: 'webgpu',
                                 webgpu: { ...webgpu, kernels: 'workgroup', rejectSubgroupShaders: true } });
  check(gpu.info.device.includes(', workgroup kernels (subgroups refused: pipeline '),
        `subgroup shaders refused: device ${gpu.info.device}`);
  const cpu = await loadEngine({ model, backend: 'cpu-ref' });
  const ids = await gpu.tokenize(fs.readFileSync(path.join(model, 'heldout_sample.txt'), 'utf8'));
  check(ids.length === g.heldout_sample_tokens, `the held-out sample: ${ids.length} tokens`);
  // (the window as ComputePerplexity feeds it: <bos>, then 126 text tokens; the output at i
  // predicts text token i)
  const seq = [2, ...ids.slice(0, 126)];
  const V = gpu.info.vocab_size;
  const a = (await gpu.newSession().score(seq, { logits: true })).logits;
  const b = (await cpu.newSession().score(seq, { logits: true })).logits;
  check(a.length === seq.length * V && b.length === seq.length * V, `scored ${a.length} / ${b.length} logits`);
  let worst = 0, nll = 0;
  for (let t = 0; t < seq.length; ++t) {
    const row = a.slice(t * V, (t + 1) * V);
    const e = relL2(row, b.slice(t * V, (t + 1) * V));
    worst = Math.max(worst, e);
    check(e <= 1e-4, `tiny-trained, workgroup kernels, position ${t}: rel L2 ${e} from cpu-ref`);
    const m = Math.max(...row);
    nll += m + Math.log(row.reduce((s, v) => s + Math.exp(v - m), 0)) - row[ids[t]];
  }
  check(Math.abs(nll - want) <= 1e-2, `tiny-trained window NLL ${nll}, transformers ${want}`);
  console.log(`prompt kernels, tiny-trained (workgroup kernels, the subgroup shaders refused): ${seq.length} tokens in chunks of 64, worst logits rel L2 ${worst.toExponential(2)} vs cpu-ref, window NLL ${nll.toFixed(4)} vs transformers ${want.toFixed(4)}`);
  // (--all-kernels) The prompt-chunk kernels are compiled at a chunk's first use; where the
  // compiler refuses them then, the chunks take the general kernels: the same logits.
  if (allKernels) {
    const refused = await loadEngine({ model, backend: 'webgpu', webgpu: { ...webgpu, kernels: 'workgroup',
                                       rejectKernels: 'attention_prompt_wg|linear_dense_tile_wg' } });
    const r = (await refused.newSession().score(seq, { logits: true })).logits;
    let worstRefused = 0;
    for (let t = 0; t < seq.length; ++t) {
      const e = relL2(r.slice(t * V, (t + 1) * V), b.slice(t * V, (t + 1) * V));
      worstRefused = Math.max(worstRefused, e);
      check(e <= 1e-4, `tiny-trained, prompt kernels refused, position ${t}: rel L2 ${e} from cpu-ref`);
    }
    console.log(`prompt kernels refused at their first use: the general kernels, worst logits rel L2 ${worstRefused.toExponential(2)} vs cpu-ref`);
    await refused.destroy();
  }
  await gpu.destroy();
  await cpu.destroy();
}

// The trained tiny model (real tokenizer, chat template): chat, a regex constraint (the select
// path) and seeded sampling give the module's CPU reference's tokens; a device loss fails the
// request in flight, and the next one, after the device is rebuilt and the conversation
// replayed, continues exactly.
{
  const model = path.join(sourceDir, 'models/tiny-trained');
  const gpu = await loadEngine({ model, backend: 'webgpu', webgpu });
  const cpu = await loadEngine({ model, backend: 'cpu-ref' });
  console.log(`tiny-trained on ${gpu.info.device}`);
  const msgs = [{ role: 'user', content: 'Hello! Who are you?' }];
  const cases = [
    [msgs, { max_tokens: 24, temperature: 0 }],
    ['The Debian project', { max_tokens: 16, temperature: 0.9, top_p: 0.95, seed: 7, logprobs: 2 }],
    ['Answer:', { max_tokens: 12, temperature: 0, regex: '[a-z ]{3,20}\\.' }],
  ];
  for (const [input, opts] of cases) {
    const a = await gpu.newSession().generate(input, opts);
    const b = await cpu.newSession().generate(input, opts);
    check(JSON.stringify(a.tokens) === JSON.stringify(b.tokens),
          `${JSON.stringify(opts)}: webgpu ${a.tokens} vs cpu-ref ${b.tokens}`);
    if (opts.logprobs) {
      const d = Math.max(...a.logprobs.map((l, i) => Math.abs(l.logprob - b.logprobs[i].logprob)));
      check(d < 1e-3, `sampled log-probs differ by ${d}`);
    }
  }

  // Two conversations on one model, their turns interleaved: each as the CPU reference has it.
  {
    const ga = gpu.newSession(), gb = gpu.newSession(), ca = cpu.newSession(), cb = cpu.newSession();
    const qa = [{ role: 'user', content: 'What is Debian?' }];
    const qb = [{ role: 'user', content: 'What is Python?' }];
    const opts = { max_tokens: 10, temperature: 0 };
    const [a1, b1] = [await ga.generate(qa, opts), await gb.generate(qb, opts)];
    const [a2, b2] = [await ca.generate(qa, opts), await cb.generate(qb, opts)];
    const qa2 = [...qa, { role: 'assistant', content: a1.text }, { role: 'user', content: 'Why?' }];
    const qb2 = [...qb, { role: 'assistant', content: b1.text }, { role: 'user', content: 'Why?' }];
    const [a3, b3] = [await ga.generate(qa2, opts), await gb.generate(qb2, opts)];
    const [a4, b4] = [await ca.generate(qa2, opts), await cb.generate(qb2, opts)];
    const same = (x, y) => JSON.stringify(x.tokens) === JSON.stringify(y.tokens);
    check(same(a1, a2) && same(b1, b2) && same(a3, a4) && same(b3, b4), 'interleaved conversations differ from the CPU reference');
    check(a3.telemetry.reused_tokens > 0 && b3.telemetry.reused_tokens > 0, 'interleaved conversations reused no prefix');
    console.log(`two interleaved conversations: identical to cpu-ref, second turns reused ${a3.telemetry.reused_tokens} / ${b3.telemetry.reused_tokens} tokens`);
  }

  // Device loss mid-conversation.
  const sg = gpu.newSession(), sc = cpu.newSession();
  const turn1 = [...msgs];
  const a1 = await sg.generate(turn1, { max_tokens: 12, temperature: 0 });
  const b1 = await sc.generate(turn1, { max_tokens: 12, temperature: 0 });
  check(JSON.stringify(a1.tokens) === JSON.stringify(b1.tokens), 'first turn differs');
  await gpu.loseDevice();
  const turn2 = [...turn1, { role: 'assistant', content: a1.text }, { role: 'user', content: 'And then?' }];
  let failed = null;
  try {
    await sg.generate(turn2, { max_tokens: 12, temperature: 0 });
  } catch (e) {
    failed = e;
  }
  check(failed && failed.code === 'device', `the request after the loss: ${failed ? failed.code : 'succeeded'}`);
  const a2 = await sg.generate(turn2, { max_tokens: 12, temperature: 0 });
  const b2 = await sc.generate(turn2, { max_tokens: 12, temperature: 0 });
  check(JSON.stringify(a2.tokens) === JSON.stringify(b2.tokens), `after the rebuild: ${a2.tokens} vs ${b2.tokens}`);
  check(a2.telemetry.reused_tokens > 0, 'the conversation was not kept across the rebuild');
  console.log(`device loss: failed with ${failed?.code}, then ${a2.tokens.length} tokens identical, ${a2.telemetry.reused_tokens} reused`);
  await gpu.destroy();
  await cpu.destroy();
}
// Images with the WebGPU backend: the vision tower runs on the module's CPU (the cpu backend's
// kernels), the text model on the GPU. A synthetic tiny model with a vision tower
// (`gemma-engine synth --preset tiny`), a chat message with an image: the same tokens as the cpu
// backend's, log-probs within 1e-3, the image encoded once and reused by the next turn.
if (process.env.GEMMA_BIN_GEMMA_ENGINE) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gemma-webgpu-vision-'));
  execFileSync(process.env.GEMMA_BIN_GEMMA_ENGINE, ['synth', '--preset', 'tiny', '--out', dir, '--seed', '9'], { stdio: 'pipe' });
  const bmp = fs.readFileSync(path.join(sourceDir, 'tests/goldens/vision/images/plain_50x40.bmp'));
  const msgs = [{ role: 'user', content: [{ type: 'image', bytes: bmp.toString('base64'), budget: 70 },
                                          { type: 'text', text: 'What is this?' }] }];
  const opts = { max_tokens: 6, temperature: 0, ignore_eos: true, logprobs: true };
  const gpu = await loadEngine({ model: dir, backend: 'webgpu', webgpu });
  const cpu = await loadEngine({ model: dir, backend: 'cpu' });
  const sg = gpu.newSession();
  const a = await sg.generate(msgs, opts);
  const b = await cpu.newSession().generate(msgs, opts);
  check(a.telemetry.images === 1 && a.telemetry.images_encoded === 1 && a.telemetry.vision_ms > 0,
        `webgpu, an image: ${JSON.stringify({ images: a.telemetry.images, encoded: a.telemetry.images_encoded })}`);
  check(JSON.stringify(a.tokens) === JSON.stringify(b.tokens), `webgpu with an image: ${a.tokens} vs cpu ${b.tokens}`);
  const d = Math.max(...a.logprobs.map((l, i) => Math.abs(l.logprob - b.logprobs[i].logprob)));
  check(d < 1e-3, `webgpu with an image: log-probs differ from cpu's by ${d}`);
  const next = await sg.generate([...msgs, { role: 'assistant', content: a.text }, { role: 'user', content: 'And?' }],
                                 { max_tokens: 2 });
  check(next.telemetry.images_encoded === 0 && next.telemetry.reused_tokens > 0,
        `webgpu, the next turn encoded ${next.telemetry.images_encoded} images again, reused ${next.telemetry.reused_tokens}`);
  console.log(`an image on webgpu (the tower on the CPU): ${a.tokens.length} tokens identical to cpu, log-probs within ${d.toExponential(1)}, ` +
              `${a.telemetry.prompt_tokens}-token prompt, the next turn reused it`);
  await gpu.destroy();
  await cpu.destroy();
  fs.rmSync(dir, { recursive: true, force: true });
}
// Two engines in one module share the device: each keeps its weights and answers as alone.
{
  const dawnPkg = createRequire(import.meta.url)(dawn);
  Object.assign(globalThis, dawnPkg.globals);
  const gpu = dawnPkg.create(['backend=vulkan']);
  const M = await loadModule({ gpu });
  const unwrap = (t) => {
    const r = JSON.parse(t);
    if (r.error) throw new Error(r.error.message);
    return r.ok;
  };
  const load = async (dir) => M.Engine.get(unwrap(await M.Engine.load(JSON.stringify({
    model_path: host(dir), backend: 'webgpu', context: 256 }))).handle);
  const names = ['tiny_dense_bf16', 'tiny_qat'];
  const engines = [];
  for (const n of names) engines.push(await load(path.join(sourceDir, 'tests/goldens/model', n)));
  for (let round = 0; round < 2; ++round) {
    for (const [i, n] of names.entries()) {
      const g = JSON.parse(fs.readFileSync(path.join(sourceDir, 'tests/goldens/model', n, 'goldens.json'), 'utf8'));
      const s = engines[i].newSession();
      const r = unwrap(await s.generate(JSON.stringify({ prompt: g.prompts[round] }),
        JSON.stringify({ max_tokens: g.greedy[round].length, temperature: 0, ignore_eos: true }), null));
      check(JSON.stringify(r.tokens) === JSON.stringify(g.greedy[round]), `${n} beside another engine: ${r.tokens}`);
      s.delete();
    }
  }
  console.log('two engines in one module: both answer as transformers');
  for (const e of engines) e.delete();
}
finish('web_webgpu_test');
process.exit(0);  // Dawn for Node can crash in its teardown at a natural exit
