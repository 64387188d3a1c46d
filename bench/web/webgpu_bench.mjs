// The WebGPU backend's speed under Node through Dawn for Node (npm `webgpu`, tools/setup.sh puts it
// in .cache/npm-assets), against the module's fast CPU backend, interleaved runs, medians:
//   node bench/web/webgpu_bench.mjs [MODEL_DIR] [TOKENS] [RUNS] [DAWN_FLAGS] [KERNELS] [WORDS]
// DAWN_FLAGS: comma-separated create() flags (default backend=vulkan). KERNELS: the WebGPU kernel
// families to run side by side (default workgroup,rows; "workgroup-nosg": the workgroup kernels
// with webgpu.subgroups false, so "workgroup,workgroup-nosg" compares the subgroup reductions with
// the workgroup-memory ones where the adapter has `subgroups`; "workgroup-mv1024": the decode
// matvecs on 1,024 workgroups, webgpu.matvecWorkgroups). On a machine without a GPU
// set VK_ICD_FILENAMES=/usr/lib/chromium/vk_swiftshader_icd.json (SwiftShader: correctness speed,
// not a GPU's). Prompt: WORDS (default 64) copies of "Debian" (prefill), then TOKENS greedy tokens
// (decode). KERNELS may also hold "profile" (a GPU profile of every dispatch, printed by the worker).
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const root = path.resolve(new URL('../..', import.meta.url).pathname);
const model = fs.realpathSync(process.argv[2] ?? path.join(root, 'models/tiny-trained'));
const tokens = Number(process.argv[3] ?? 64);
const runs = Number(process.argv[4] ?? 3);
const flags = (process.argv[5] ?? 'backend=vulkan').split(',');
const web = process.env.GEMMA_WEB_BUILD_DIR ?? path.join(root, 'build-web');
// KERNELS may hold "nocpu": no CPU-backend rows (full-size checkpoints: minutes per run).
// "profile": every dispatch timed on the GPU (bench/web/dawn_profile.mjs prints per-kernel tables).
const families = (process.argv[6] ?? 'workgroup,rows').split(',').filter((f) => !['nocpu', 'profile', 'passprofile'].includes(f));
const withCpu = !(process.argv[6] ?? '').split(',').includes('nocpu');
// "passprofile": each submit's one pass timed as recorded, against the wall and host time
// (dawn_profile.mjs, GEMMA_DAWN_PROFILE=pass).
const passProfile = (process.argv[6] ?? '').split(',').includes('passprofile');
if (passProfile) process.env.GEMMA_DAWN_PROFILE = 'pass';
const profile = passProfile || (process.argv[6] ?? '').split(',').includes('profile');
const words = Number(process.argv[7] ?? 64);
const dawn = profile ? path.join(root, 'bench/web/dawn_profile.mjs') : path.join(root, '.cache/npm-assets/node_modules/webgpu');
const { loadEngine } = await import(pathToFileURL(path.join(web, 'lib/gemma-engine.mjs')).href);

const engines = {};
for (const family of families) {
  // FAMILY-VARIANT...: nosg (webgpu.subgroups false), mvN (webgpu.matvecWorkgroups N)
  const [kernels, ...variants] = family.split('-');
  const webgpu = { module: dawn, flags, kernels };
  for (const v of variants) {
    if (v === 'nosg') webgpu.subgroups = false;
    else if (/^mv\d+$/.test(v)) webgpu.matvecWorkgroups = Number(v.slice(2));
    else throw new Error(`unknown variant ${v} in ${family}`);
  }
  engines[family] = await loadEngine({ model, backend: 'webgpu', webgpu, context: Math.max(2048, words + tokens + 64) });
  console.log(`${path.basename(model)} on ${engines[family].info.device}`);
}
if (withCpu) engines.cpu = await loadEngine({ model, backend: 'cpu', context: Math.max(2048, words + tokens + 64) });
console.log(`${tokens} tokens, ${runs} runs`);
const prompt = Array(words).fill('Debian').join(' ');
const med = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const t = {};
for (const b of Object.keys(engines)) t[b] = { pre: [], dec: [] };
const first = {};  // each engine's tokens of the first run
for (let r = 0; r < runs; ++r) {
  for (const b of Object.keys(engines)) {
    const res = await engines[b].newSession().generate(prompt, { max_tokens: tokens, ignore_eos: true, temperature: 0 });
    t[b].pre.push(res.telemetry.prompt_tokens / (res.telemetry.prefill_ms / 1000));
    t[b].dec.push(res.telemetry.decode_tok_s);
    first[b] ??= res.tokens;
  }
}
// The families compute the same model: their greedy tokens should agree (float sums in other
// orders may flip a near tie).
const [ref, ...others] = Object.keys(first);
for (const b of others) {
  const i = first[b].findIndex((id, k) => id !== first[ref][k]);
  console.log(`tokens ${b} vs ${ref}: ${i < 0 ? 'identical' : `first difference at token ${i}`}`);
}
for (const b of Object.keys(engines)) {
  const vs = b === 'cpu' || !withCpu ? '' : `  (x cpu: prefill ${(med(t[b].pre) / med(t.cpu.pre)).toFixed(2)}, decode ${(med(t[b].dec) / med(t.cpu.dec)).toFixed(2)})`;
  console.log(`${b.padEnd(14)} prefill ${med(t[b].pre).toFixed(1)} tok/s  decode ${med(t[b].dec).toFixed(1)} tok/s${vs}`);
}
for (const e of Object.values(engines)) await e.destroy();
