// Decode speed of the pthreads build (THREADS=1 bash tools/build-web.sh) under Node with N threads,
// three runs, and the greedy tokens (bench/journal/2026-12-03-web-simd.md):
//   node bench/web/threads_bench.mjs MODEL_DIR THREADS [TOKENS]
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const root = path.resolve(new URL('../..', import.meta.url).pathname);
const web = process.env.GEMMA_WEB_BUILD_DIR ?? path.join(root, 'build-web');
const model = fs.realpathSync(process.argv[2]);
const threads = Number(process.argv[3] ?? 2);
const tokens = Number(process.argv[4] ?? 64);
const moduleUrl = pathToFileURL(path.join(web, 'gemma-engine-mt.js')).href;
globalThis.require ??= createRequire(moduleUrl);
globalThis.__dirname ??= web;
const { default: create } = await import(moduleUrl);
// At least one Worker: Emscripten 3.1.6 never resolves the load of an empty pool.
const M = await create({ wasmBinary: fs.readFileSync(path.join(web, 'gemma-engine-mt.wasm')),
                         gemmaPthreads: Math.max(1, threads - 1) });
M.FS.mkdir('/model');
M.FS.mount(M.NODEFS, { root: model }, '/model');
const info = JSON.parse(M.Engine.load(JSON.stringify({ model_path: '/model', backend: 'cpu', context: 1024, threads })));
if (info.error) throw new Error(info.error.message);
const engine = M.Engine.get(info.ok.handle);
for (let k = 0; k < 3; ++k) {
  const s = engine.newSession();
  const r = JSON.parse(s.generate(JSON.stringify({ prompt: 'The Debian project' }),
                                  JSON.stringify({ max_tokens: tokens, ignore_eos: true, temperature: 0 }), null));
  s.delete();
  console.log(`${path.basename(model)}, ${threads} thread(s): decode ${r.ok.telemetry.decode_tok_s.toFixed(1)} tok/s, ` +
              `tokens ${JSON.stringify(r.ok.tokens.slice(0, 8))}...`);
}
process.exit(0);
