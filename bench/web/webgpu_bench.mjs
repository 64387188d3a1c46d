// The WebGPU backend's speed under Node through Dawn for Node (npm `webgpu`, tools/setup.sh puts it
// in .cache/npm-assets), against the module's fast CPU backend, interleaved runs, medians:
//   node bench/web/webgpu_bench.mjs [MODEL_DIR] [TOKENS] [RUNS] [DAWN_FLAGS]
// DAWN_FLAGS: comma-separated create() flags (default backend=vulkan). On a machine without a GPU
// set VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json (SwiftShader: correctness speed,
// not a GPU's). Prompt: 64 copies of "Debian" (prefill), then TOKENS greedy tokens (decode).
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const root = path.resolve(new URL('../..', import.meta.url).pathname);
const model = fs.realpathSync(process.argv[2] ?? path.join(root, 'models/tiny-trained'));
const tokens = Number(process.argv[3] ?? 64);
const runs = Number(process.argv[4] ?? 3);
const flags = (process.argv[5] ?? 'backend=vulkan').split(',');
const web = process.env.GEMMA_WEB_BUILD_DIR ?? path.join(root, 'build-web');
const webgpu = { module: path.join(root, '.cache/npm-assets/node_modules/webgpu'), flags };
const { loadEngine } = await import(pathToFileURL(path.join(web, 'lib/gemma-engine.mjs')).href);

const engines = {
  webgpu: await loadEngine({ model, backend: 'webgpu', webgpu, context: 2048 }),
  cpu: await loadEngine({ model, backend: 'cpu', context: 2048 }),
};
console.log(`${path.basename(model)} on ${engines.webgpu.info.device}; ${tokens} tokens, ${runs} runs`);
const prompt = Array(64).fill('Debian').join(' ');
const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const t = { webgpu: { pre: [], dec: [] }, cpu: { pre: [], dec: [] } };
for (let r = 0; r < runs; ++r) {
  for (const b of ['webgpu', 'cpu']) {
    const res = await engines[b].newSession().generate(prompt, { max_tokens: tokens, ignore_eos: true, temperature: 0 });
    t[b].pre.push(res.telemetry.prompt_tokens / (res.telemetry.prefill_ms / 1000));
    t[b].dec.push(res.telemetry.decode_tok_s);
  }
}
for (const b of ['webgpu', 'cpu']) {
  console.log(`${b.padEnd(7)} prefill ${med(t[b].pre).toFixed(1)} tok/s  decode ${med(t[b].dec).toFixed(1)} tok/s`);
}
console.log(`webgpu / cpu: prefill ${(med(t.webgpu.pre) / med(t.cpu.pre)).toFixed(2)}x, decode ${(med(t.webgpu.dec) / med(t.cpu.dec)).toFixed(2)}x`);
for (const e of Object.values(engines)) await e.destroy();
