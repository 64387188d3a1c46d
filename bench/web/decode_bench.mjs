// Decode speed of the WebAssembly module under Node against the native command line, one thread,
// interleaved runs, medians (bench/journal/2026-12-02-web.md):
//   node bench/web/decode_bench.mjs [MODEL_DIR] [TOKENS] [RUNS] [fast]
// "fast" leaves out the reference backend (slow on E2B-width checkpoints).
// Needs build-web/ (tools/build-web.sh) and build/tools/gemma-engine.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const root = path.resolve(new URL('../..', import.meta.url).pathname);
const model = fs.realpathSync(process.argv[2] ?? path.join(root, 'models/tiny-trained'));
const tokens = Number(process.argv[3] ?? 128);
const runs = Number(process.argv[4] ?? 3);
const fastOnly = process.argv[5] === 'fast';
const web = process.env.GEMMA_WEB_BUILD_DIR ?? path.join(root, 'build-web');
const cli = process.env.GEMMA_ENGINE ?? path.join(root, 'build/tools/gemma-engine');
const prompt = 'The Debian project';

const moduleUrl = pathToFileURL(path.join(web, 'gemma-engine.js')).href;
globalThis.require ??= createRequire(moduleUrl);
globalThis.__dirname ??= web;
const { default: create } = await import(moduleUrl);
const M = await create({ wasmBinary: fs.readFileSync(path.join(web, 'gemma-engine.wasm')) });
M.FS.mkdir('/model');
M.FS.mount(M.NODEFS, { root: model }, '/model');
const engines = {};
for (const backend of fastOnly ? ['cpu'] : ['cpu', 'cpu-ref']) {
  const info = JSON.parse(M.Engine.load(JSON.stringify({ model_path: '/model', backend, context: 1024 })));
  if (info.error) throw new Error(info.error.message);
  engines[backend] = M.Engine.get(info.ok.handle);
}

function wasm(backend) {
  const s = engines[backend].newSession();
  const r = JSON.parse(s.generate(JSON.stringify({ prompt }), JSON.stringify({ max_tokens: tokens, ignore_eos: true, temperature: 0 }), null));
  s.delete();
  return r.ok.telemetry;
}
function native(backend) {
  const out = execFileSync(cli, ['run', '--model', model, '-p', prompt, '-n', String(tokens), '--ignore-eos',
                                 '--temperature', '0', '--threads', '1', '--backend', backend, '--context', '1024', '--json']);
  return JSON.parse(out.toString()).telemetry;
}
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const arms = [['wasm cpu (Node)', () => wasm('cpu')], ['wasm cpu-ref (Node)', () => wasm('cpu-ref')],
              ['native cpu-ref', () => native('cpu-ref')], ['native cpu (fast)', () => native('cpu')]]
  .filter(([name]) => !fastOnly || !name.includes('cpu-ref'));
const rows = Object.fromEntries(arms.map(([name]) => [name, []]));
const prefill = Object.fromEntries(arms.map(([name]) => [name, []]));
for (const backend of Object.keys(engines)) wasm(backend);  // warm-up: faults in the heap
for (let i = 0; i < runs; ++i) {
  for (const [name, f] of arms) {
    const t = f();
    rows[name].push(t.decode_tok_s);
    prefill[name].push(t.prefill_ms);
  }
}
console.log(`${path.basename(model)}: ${tokens} tokens after '${prompt}', 1 thread, median of ${runs}`);
const fast = median(rows['native cpu (fast)']);
for (const [name, v] of Object.entries(rows)) {
  console.log(`  ${name.padEnd(22)} decode ${median(v).toFixed(1).padStart(7)} tok/s  (${(median(v) / fast).toFixed(2)}x native fast)  ` +
              `runs ${v.map((x) => x.toFixed(0)).join(' ')}  prefill ${median(prefill[name]).toFixed(2)} ms`);
}
