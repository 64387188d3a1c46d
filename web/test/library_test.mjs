// The ES module library (web/lib/gemma-engine.mjs) under Node: the engine in a worker_threads
// worker, generation streamed through onToken with backpressure, AbortSignal cancels, errors as
// GemmaError with the engine's code, and greedy answers identical to the native command line's
// (`gemma-engine run --json`, CPU reference backend) on the trained tiny model.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { check, finish, requireWebBuild, sourceDir, webDir } from './harness.mjs';

requireWebBuild();
const { loadEngine, GemmaError } = await import(pathToFileURL(path.join(webDir, 'lib/gemma-engine.mjs')).href);
const model = path.join(sourceDir, 'models/tiny-trained');
const cli = process.env.GEMMA_BIN_GEMMA_ENGINE;

const engine = await loadEngine({ model, backend: 'cpu-ref' });
check(engine.info.backend === 'cpu-reference', `backend ${engine.info.backend}`);
check(engine.info.modalities.image === false && engine.info.modalities.audio === false,
      `a text-only model's modalities: ${JSON.stringify(engine.info.modalities)}`);
const session = engine.newSession();
const messages = [{ role: 'user', content: 'Hello! Who are you?' }];

// Streaming: the deltas make up the raw text; the page's event loop keeps turning meanwhile.
let streamed = '';
let ticks = 0;
const timer = setInterval(() => ++ticks, 1);
const r = await session.generate(messages, { max_tokens: 40, onToken: (t) => { streamed += t.delta; } });
clearInterval(timer);
check(r.text.length > 0 && streamed === r.raw_text.slice(0, streamed.length) && streamed.length > 0,
      `streamed text '${streamed}' vs raw '${r.raw_text}'`);
check(ticks > 0, 'the main thread was blocked during generation');
console.log(`generate: ${r.tokens.length} tokens, stop ${r.stop_reason}, decode ${r.telemetry.decode_tok_s.toFixed(1)} tok/s: ${JSON.stringify(r.text)}`);

// The native command line's greedy answer to the same messages.
if (cli) {
  const file = path.join(os.tmpdir(), `gemma-web-msgs-${process.pid}.json`);
  fs.writeFileSync(file, JSON.stringify(messages));
  const out = JSON.parse(execFileSync(cli, ['run', '--model', model, '--messages', file, '--json', '-n', '40',
                                            '--backend', 'cpu-ref', '--temperature', '0']).toString());
  fs.rmSync(file);
  check(JSON.stringify(out.tokens) === JSON.stringify(r.tokens), `tokens differ from the native CLI: ${out.tokens} vs ${r.tokens}`);
  check(out.text === r.text, 'text differs from the native CLI');
  console.log('native CLI: identical tokens and text');
} else {
  console.log('native CLI: not compared (GEMMA_BIN_GEMMA_ENGINE unset)');
}

// Seeded sampling with log-probs: the same seed gives the same tokens (the C++ API's determinism).
const s1 = await session.generate('The Debian project', { max_tokens: 12, temperature: 0.9, top_p: 0.95, seed: 7, logprobs: 3 });
const s2 = await session.generate('The Debian project', { max_tokens: 12, temperature: 0.9, top_p: 0.95, seed: 7, logprobs: 3 });
check(JSON.stringify(s1.tokens) === JSON.stringify(s2.tokens) && s1.logprobs.length === s1.tokens.length,
      'seeded sampling is not reproducible or lacks log-probs');
check(s2.telemetry.reused_tokens > 0, 'the second identical prompt reused no cached tokens');

// Backpressure: a slow onToken (15 ms) holds the worker back to `window` (2) tokens ahead, so
// the engine's own generation time (telemetry, measured in the worker) stretches to match.
{
  const session2 = engine.newSession();
  const rr = await session2.generate('Debian is', {
    max_tokens: 16, ignore_eos: true, window: 2,
    onToken: () => new Promise((f) => setTimeout(f, 15)),
  });
  const floor = (rr.tokens.length - 2 - 2) * 15;
  check(rr.telemetry.total_ms >= floor, `generation took ${rr.telemetry.total_ms.toFixed(1)} ms, under the backpressure floor ${floor} ms`);
  console.log(`backpressure: ${rr.tokens.length} tokens in ${rr.telemetry.total_ms.toFixed(0)} ms of engine time (floor ${floor} ms)`);
  await session2.destroy();
}

// AbortSignal: cancelled after 3 tokens; the session stays usable.
{
  const ac = new AbortController();
  let n = 0;
  const res = await session.generate('Debian is a free operating system', {
    max_tokens: 200, ignore_eos: true, signal: ac.signal, onToken: () => { if (++n === 3) ac.abort(); },
  }).then((x) => x, (e) => e);
  const cancelled = res instanceof GemmaError ? res.code === 'cancelled' : res.stop_reason === 'cancelled';
  check(cancelled, `abort did not cancel: ${res instanceof Error ? res.code : res.stop_reason}`);
  check(n < 200, `generation ran on after the abort (${n} tokens)`);
  const again = await session.generate('Debian', { max_tokens: 4 });
  check(again.tokens.length > 0, 'the session is not usable after a cancel');
  console.log(`abort: cancelled after ${n} streamed tokens (${res instanceof GemmaError ? 'GemmaError ' + res.code : 'stop_reason ' + res.stop_reason}); session usable`);
}

// Errors keep the engine's code and the field.
{
  const e = await session.generate('x', { temperature: -1 }).then(() => null, (x) => x);
  check(e instanceof GemmaError && e.code === 'invalid_argument' && e.param === 'temperature',
        `bad temperature: ${e && e.code} ${e && e.param}`);
  const e2 = await loadEngine({ model: '/nonexistent-model' }).then(() => null, (x) => x);
  check(e2 instanceof GemmaError && e2.code === 'io', `missing model: ${e2 && e2.code}: ${e2 && e2.message}`);
}

// The cache's incremental SHA-256 against Node's, over lengths around the block boundaries, fed
// in pieces.
{
  const { Sha256 } = await import(pathToFileURL(path.join(webDir, 'lib/model-cache.mjs')).href);
  const { createHash, randomBytes } = await import('node:crypto');
  let bad = 0;
  for (let n = 0; n < 300; n += 7) {
    const data = randomBytes(n);
    const sha = new Sha256();
    for (let at = 0; at < n; at += 13) sha.update(new Uint8Array(data.subarray(at, at + 13)));
    if (sha.hex() !== createHash('sha256').update(data).digest('hex')) ++bad;
  }
  check(bad === 0, `model-cache Sha256: ${bad} lengths differ from node:crypto`);
}

// Threads (the pthreads build, THREADS=1 bash tools/build-web.sh; not in CI): two threads give
// the single-threaded module's tokens and log-probs bit for bit (rows are split between threads,
// each row's sum is the same), bf16 and QAT.
if (fs.existsSync(path.join(webDir, 'gemma-engine-mt.js'))) {
  for (const sub of ['models/tiny-trained', 'models/tiny-trained/qat']) {
    const out = [];
    for (const threads of [1, 2]) {
      const e = await loadEngine({ model: path.join(sourceDir, sub), backend: 'cpu', threads });
      check(e.info.threads === threads, `${sub}: asked for ${threads} threads, runs ${e.info.threads}`);
      const s = e.newSession();
      out.push(await s.generate('The Debian project', { max_tokens: 48, ignore_eos: true, temperature: 0, logprobs: 5 }));
      await e.destroy();
    }
    check(out[0].tokens.length === 48 && JSON.stringify(out[0].tokens) === JSON.stringify(out[1].tokens),
          `${sub}: 2 threads' tokens differ from 1 thread's`);
    check(JSON.stringify(out[0].logprobs) === JSON.stringify(out[1].logprobs), `${sub}: 2 threads' log-probs differ`);
    console.log(`threads: ${sub}, 2 threads = 1 thread (48 tokens, top-5 log-probs bit for bit); decode ` +
                `${out[0].telemetry.decode_tok_s.toFixed(0)} / ${out[1].telemetry.decode_tok_s.toFixed(0)} tok/s`);
  }
} else {
  console.log('threads: skipped (no gemma-engine-mt.js: THREADS=1 bash tools/build-web.sh)');
}

// Images in chat messages (a data URL and base64 bytes at budgets 70 and 140, then an OpenAI
// image_url part) on a synthetic tiny model with a vision tower (`gemma-engine synth --preset tiny`):
// both run through the tower, each as its run of soft tokens (50 x 40 at 70 and 140: 63 and 130,
// vision_golden_test's VisionMessages counts), and a second request reuses them.
if (cli) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gemma-web-vision-'));
  execFileSync(cli, ['synth', '--preset', 'tiny', '--out', dir, '--seed', '9']);
  const bmp = fs.readFileSync(path.join(sourceDir, 'tests/goldens/vision/images/plain_50x40.bmp'));
  const url = 'data:image/bmp;base64,' + bmp.toString('base64');
  const content = [{ type: 'image', url, budget: 70 },
                   { type: 'image', bytes: bmp.toString('base64'), budget: 140 },
                   { type: 'text', text: 'Which is different?' }];
  const ve = await loadEngine({ model: dir, backend: 'cpu' });
  const vp = await ve.props();
  // (its audio tower takes no input in the module, which decodes no audio)
  check(vp.modalities.image === true && vp.modalities.audio === false,
        `the tiny preset's modalities: ${JSON.stringify(vp.modalities)}`);
  const vs = ve.newSession();
  const text = [{ role: 'user', content: [content[2]] }];
  const plain = await vs.generate(text, { max_tokens: 1 });
  await vs.reset();
  const vmsgs = [{ role: 'user', content }];
  const vr = await vs.generate(vmsgs, { max_tokens: 8, temperature: 0, ignore_eos: true });
  const t = vr.telemetry;
  check(t.images === 2 && t.images_encoded === 2 && t.vision_ms > 0 && vr.tokens.length === 8,
        `images: ${JSON.stringify({ images: t.images, encoded: t.images_encoded, ms: t.vision_ms, tokens: vr.tokens.length })}`);
  // Each image adds <|image>, its soft tokens and <image|> to the text's prompt.
  check(t.prompt_tokens === plain.telemetry.prompt_tokens + (63 + 2) + (130 + 2),
        `images: a ${t.prompt_tokens}-token prompt, the text alone ${plain.telemetry.prompt_tokens}`);
  const again = await vs.generate([...vmsgs, { role: 'assistant', content: vr.text }, { role: 'user', content: 'And?' }],
                                  { max_tokens: 2 });
  check(again.telemetry.images === 2 && again.telemetry.images_encoded === 0 && again.telemetry.reused_tokens > 0,
        `images: the next turn encoded ${again.telemetry.images_encoded} of ${again.telemetry.images} again`);
  const openai = await vs.generate([{ role: 'user', content: [{ type: 'image_url', image_url: { url } }] }],
                                   { max_tokens: 1 });
  check(openai.telemetry.images === 1, `images: an image_url part gave ${openai.telemetry.images} images`);
  let webp = null;
  try {
    await vs.generate([{ role: 'user', content: [{ type: 'image', url: 'data:image/webp;base64,UklGRgAAAABXRUJQ' }] }],
                      { max_tokens: 1 });
  } catch (e) {
    webp = e;
  }
  check(webp instanceof GemmaError && ['unsupported', 'format'].includes(webp.code), `a WebP image: ${webp && webp.code}`);
  await vs.destroy();
  await ve.destroy();
  fs.rmSync(dir, { recursive: true, force: true });
  console.log(`images: a ${t.prompt_tokens}-token prompt with 2 images (${t.vision_ms.toFixed(0)} ms), reused by the ` +
              `next turn; WebP refused (${webp && webp.code}: ${webp && webp.message})`);
}

await session.reset();
const ids = await engine.tokenize('Hello world');
check(Array.isArray(ids) && ids.length > 0, 'tokenize');
await session.destroy();
await engine.destroy();
finish('web_library_test');
