// Vision time of the WebAssembly module under Node (one thread): one 1024 x 768 picture through
// the tower and embed_vision at each budget, the session's `media_ms` + `vision_ms` (decode,
// preprocessing and the tower), median of RUNS after a warm-up, beside the seed engine's browser figures (1.1 / 2.3 /
// 5.5 s at 70 / 140 / 280 tokens, issue 38).
//   node bench/web/vision_bench.mjs MODEL_DIR [BUDGETS] [RUNS] [BACKEND]
// MODEL_DIR: a checkpoint with E2B's vision tower on a small text model (`vision_bench --synth
// /tmp/vision-e2b`). Needs build-web/ (tools/build-web.sh; GEMMA_WEB_BUILD_DIR: another build).
import fs from 'node:fs';
import path from 'node:path';
import { host, loadModule } from '../../web/test/harness.mjs';

const model = fs.realpathSync(process.argv[2] ?? '/tmp/vision-e2b');
const budgets = (process.argv[3] ?? '70,140,280').split(',').map(Number);
const runs = Number(process.argv[4] ?? 3);
const backend = process.argv[5] ?? 'cpu';
const seed = { 70: 1.1, 140: 2.3, 280: 5.5 };

// A 1024 x 768 24-bit BMP with smooth gradients and a checker pattern (any content: the time
// depends on the size and the budget).
function picture(w, h) {
  const row = Math.ceil((3 * w) / 4) * 4;
  const b = Buffer.alloc(54 + row * h);
  b.write('BM', 0);
  b.writeUInt32LE(b.length, 2);
  b.writeUInt32LE(54, 10);
  b.writeUInt32LE(40, 14);
  b.writeInt32LE(w, 18);
  b.writeInt32LE(h, 22);
  b.writeUInt16LE(1, 26);
  b.writeUInt16LE(24, 28);
  b.writeUInt32LE(row * h, 34);
  for (let y = 0; y < h; ++y) {
    for (let x = 0; x < w; ++x) {
      const o = 54 + y * row + 3 * x;
      const c = ((x >> 5) + (y >> 5)) & 1 ? 40 : 0;
      b[o] = (x * 255 / w + c) & 255;
      b[o + 1] = (y * 255 / h) & 255;
      b[o + 2] = ((x + y) * 127 / (w + h) + 2 * c) & 255;
    }
  }
  return b;
}
const url = 'data:image/bmp;base64,' + picture(1024, 768).toString('base64');

// (the web tests' loader: GEMMA_WEB_BUILD_DIR or build-web/, the host's files under /host)
const M = await loadModule();
const info = JSON.parse(M.Engine.load(JSON.stringify({ model_path: host(model), backend, context: 2048 })));
if (info.error) throw new Error(info.error.message);
const engine = M.Engine.get(info.ok.handle);

function once(budget) {
  const s = engine.newSession();
  const input = { messages: [{ role: 'user', content: [{ type: 'image', url, budget }, { type: 'text', text: 'Describe the image.' }] }] };
  const r = JSON.parse(s.generate(JSON.stringify(input), JSON.stringify({ max_tokens: 1, temperature: 0 }), null));
  s.delete();
  if (r.error) throw new Error(`${r.error.code}: ${r.error.message}`);
  return r.ok.telemetry;
}

console.log(`WebAssembly module under Node ${process.version}, ${backend} backend, one thread, ${path.basename(model)}, a 1024 x 768 picture`);
console.log('| budget | vision ms (median of ' + runs + ') | prompt tokens | seed engine (browser) |');
console.log('|---|---|---|---|');
for (const budget of budgets) {
  once(budget);  // (warm-up: the tower's weight copies, the pool)
  const t = [];
  let tel = null;
  for (let r = 0; r < runs; ++r) {
    tel = once(budget);
    t.push(tel.vision_ms + tel.media_ms);  // (decoding and preprocessing too, as the seed's figure)
  }
  t.sort((a, b) => a - b);
  console.log(`| ${budget} | ${t[Math.floor(t.length / 2)].toFixed(0)} | ${tel.prompt_tokens} | ${seed[budget] ? seed[budget] + ' s' : '-'} |`);
}
