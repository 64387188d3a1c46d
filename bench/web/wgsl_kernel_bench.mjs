// One WGSL kernel at a time on the GPU under Dawn for Node (issue 45): linear_mv_wg, the WebGPU
// backend's decode matvec, on E2B QAT's one-token shapes, each dispatch repeated REPS times in one
// compute pass timed with timestamps (the best of 3 passes):
//   chained: every dispatch writes the same output (Dawn records a barrier between them: what a
//            decode step's dependent dispatches pay);
//   apart:   outputs and scratch bindings alternate over 8 buffers (no hazard, no barrier: the
//            kernel's own throughput).
// Variants: "mv" = src/backend/webgpu/wgsl/linear_mv_wg.wgsl as the backend dispatches it (its
// lanes per row, its 1,024-workgroup cap); "words" = the same with the rows' single-word loop
// (the kernel's path for rows that are not whole 16-byte vectors, forced here by a row length
// that is not a multiple of 4 in the parameters but not in the data: the 2026-12-05 kernel's loads,
// with its lanes rule); "uncapped" = mv with a workgroup per row block; "cap256", "cap128" = mv
// on at most 256 / 128 workgroups (fewer quantizations of long inputs). GB/s counts the weight
// bytes. The outputs of every variant are compared with mv's (equal bit for bit).
//   node bench/web/wgsl_kernel_bench.mjs [REPS=200] [DAWN_FLAGS=backend=vulkan] [MAX_ROWS]
// (MAX_ROWS: only the shapes with at most that many rows, e.g. a quick check on SwiftShader)
// Needs .cache/npm-assets/node_modules/webgpu (tools/setup.sh); VK_ICD_FILENAMES picks the driver.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const root = path.resolve(new URL('../..', import.meta.url).pathname);
const reps = Number(process.argv[2] ?? 200);
const flags = (process.argv[3] ?? 'backend=vulkan').split(',');
const maxRows = Number(process.argv[4] ?? Infinity);
const dawn = createRequire(import.meta.url)(path.join(root, '.cache/npm-assets/node_modules/webgpu'));
Object.assign(globalThis, dawn.globals);
const wgsl = (f) => fs.readFileSync(path.join(root, 'src/backend/webgpu/wgsl', f), 'utf8');

const mvSource = wgsl('linear_mv_wg.wgsl');
// "words": the single-word loop, taken where row_words % 4 != 0: the condition is made false.
const wordsSource = mvSource.replace('if (p.row_words % 4u == 0u) {', 'if (false) {');
if (wordsSource === mvSource) throw new Error('linear_mv_wg.wgsl changed: update the words variant');

const gpu = dawn.create(flags);
const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
const subgroups = adapter.features.has('subgroups');
const device = await adapter.requestDevice({
  requiredFeatures: ['timestamp-query', ...(subgroups ? ['subgroups'] : [])],
  requiredLimits: { maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize,
                    maxBufferSize: adapter.limits.maxBufferSize },
});
globalThis.keepAlive = [gpu, adapter, device];
let failed = '';
device.onuncapturederror = (e) => { failed ||= e.error.message; };
const prelude = wgsl(subgroups ? 'prelude_subgroups.wgsl' : 'prelude_workgroup.wgsl') + wgsl('prelude.wgsl');
const pipe = (code) => device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code: prelude + code }), entryPoint: 'main' } });
const pipes = { mv: pipe(mvSource), words: pipe(wordsSource) };
pipes.uncapped = pipes.cap256 = pipes.cap128 = pipes.mv;
const ai = adapter.info ?? {};
console.log(`${[ai.vendor, ai.architecture, ai.description].filter((s) => s).join(' ')}, ${subgroups ? 'subgroup' : 'workgroup'} prelude, ${reps} dispatches per pass`);

const KIND = { q2: 3, q4: 4, q8: 5 };
const PER = { q2: 16, q4: 8, q8: 4 };
const GROUP = { q2: 4, q4: 2, q8: 1 };
// E2B QAT's one-token linears (rows x cols, kind), as the native decode profile names them.
const shapes = [
  ['q', 2048, 1536, 'q4'], ['k, v', 256, 1536, 'q4'], ['PLE gate', 256, 1536, 'q8'],
  ['o', 1536, 2048, 'q4'], ['gate, up', 6144, 1536, 'q4'], ['gate, up (wide)', 12288, 1536, 'q2'],
  ['down', 1536, 6144, 'q4'], ['down (wide)', 1536, 12288, 'q2'], ['PLE proj', 1536, 256, 'q8'],
  ['LM head', 262144, 1536, 'q2'],
];
const buffer = (bytes, usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC) => device.createBuffer({ size: Math.max(16, bytes), usage });
const filled = (words) => {
  const b = device.createBuffer({ size: Math.max(16, words * 4), usage: GPUBufferUsage.STORAGE, mappedAtCreation: true });
  const a = new Uint32Array(b.getMappedRange());
  let s = 12345;
  for (let i = 0; i < a.length; ++i) { s = (s * 1664525 + 1013904223) >>> 0; a[i] = s; }
  b.unmap();
  return b;
};
const floats = (n, v) => {  // v, or v(i)
  const b = device.createBuffer({ size: Math.max(16, n * 4), usage: GPUBufferUsage.STORAGE, mappedAtCreation: true });
  const a = new Float32Array(b.getMappedRange());
  for (let i = 0; i < n; ++i) a[i] = typeof v === 'function' ? v(i) : v;
  b.unmap();
  return b;
};

const rows = [];
for (const [name, R, C, kind] of shapes) {
  if (R > maxRows) continue;
  const rowWords = Math.ceil(C / PER[kind]);
  const w = filled(R * rowWords), scale = floats(R, 1 / 64), x = floats(C, (i) => ((i * 7919) % 257 - 128) * 0.021);
  const ys = Array.from({ length: 8 }, () => buffer(R * 4)), auxes = Array.from({ length: 8 }, () => buffer(16));
  const qs = device.createQuerySet({ type: 'timestamp', count: 2 });
  const resolve = buffer(16, GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC);
  const read = buffer(16, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
  const row = { name: `${name} ${R}x${C} ${kind}`, bytes: R * rowWords * 4 };
  for (const variant of ['mv', 'words', 'uncapped', 'cap256', 'cap128']) {
    // webgpu_backend.cc's lanes rule: ~3 16-byte vectors per invocation on rows of whole vectors,
    // else ~4 words
    let lanes = 8;
    if (variant !== 'words' && rowWords % 4 === 0) {
      while (lanes < 64 && lanes * 6 <= rowWords / 4) lanes *= 2;
    } else {
      lanes = rowWords <= 32 ? 8 : rowWords <= 64 ? 16 : rowWords <= 128 ? 32 : 64;
    }
    let blocks = Math.ceil(R / (256 / lanes));
    if (variant !== 'uncapped') blocks = Math.min(blocks, variant === 'cap256' ? 256 : variant === 'cap128' ? 128 : 1024);
    const params = new Uint32Array(64), pf = new Float32Array(params.buffer);
    params.set([R, C, rowWords, KIND[kind], 1, 0, C, 0, R, 1]);
    pf[10] = 0.02; pf[11] = 0;
    params.set([lanes, 0, 0, 0], 12);
    const ub = device.createBuffer({ size: 256, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(ub, 0, params);
    const p = pipes[variant];
    const groups = (i) => device.createBindGroup({ layout: p.getBindGroupLayout(0), entries: [
      { binding: 0, resource: { buffer: ub } }, { binding: 1, resource: { buffer: w } },
      { binding: 2, resource: { buffer: scale } }, { binding: 3, resource: { buffer: x } },
      { binding: 4, resource: { buffer: ys[i] } }, { binding: 5, resource: { buffer: auxes[i] } },
      { binding: 6, resource: { buffer: w } }, { binding: 7, resource: { buffer: scale } }] });
    const bg = Array.from({ length: 8 }, (_, i) => groups(i));
    for (const mode of ['chained', 'apart']) {
      let best = Infinity;
      for (let pass = 0; pass < 4; ++pass) {  // (the first warms up)
        const enc = device.createCommandEncoder();
        const cp = enc.beginComputePass({ timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } });
        cp.setPipeline(p);
        for (let i = 0; i < reps; ++i) {
          cp.setBindGroup(0, bg[mode === 'chained' ? 0 : i % 8]);
          cp.dispatchWorkgroups(Math.min(blocks, 16384), Math.ceil(blocks / 16384), 1);
        }
        cp.end();
        enc.resolveQuerySet(qs, 0, 2, resolve, 0);
        enc.copyBufferToBuffer(resolve, 0, read, 0, 16);
        device.queue.submit([enc.finish()]);
        await read.mapAsync(GPUMapMode.READ);
        const t = new BigUint64Array(read.getMappedRange());
        const us = Number(t[1] - t[0]) / 1e3 / reps;
        read.unmap();
        if (pass > 0) best = Math.min(best, us);
      }
      row[`${variant} ${mode}`] = best;
    }
    row[`${variant} lanes`] = `${lanes} x ${blocks}`;
    // The output, against the production kernel's (the same integer sums: equal bit for bit).
    const out = buffer(R * 4, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
    const enc = device.createCommandEncoder();
    enc.copyBufferToBuffer(ys[0], 0, out, 0, R * 4);
    device.queue.submit([enc.finish()]);
    await out.mapAsync(GPUMapMode.READ);
    const y = new Float32Array(out.getMappedRange().slice(0));
    out.destroy();
    if (variant === 'mv') row.y = y;
    else if (y.some((v, i) => !Object.is(v, row.y[i]))) row.differs = (row.differs ? row.differs + ', ' : '') + variant;
  }
  rows.push(row);
  for (const b of [w, scale, x, ...ys, ...auxes, resolve, read]) b.destroy();
  qs.destroy();
}
if (failed) console.log(`WebGPU error: ${failed}`);
const cell = (r, k) => (r[k] === undefined ? '' : `${r[k].toFixed(2)} us (${(r.bytes / r[k] / 1e3).toFixed(0)} GB/s)`);
console.log('\n| linear | mv chained | mv apart | words chained | words apart | uncapped chained | uncapped apart | 256 apart | 128 apart | lanes x workgroups (mv / words / uncapped) | outputs |');
console.log('|---|---|---|---|---|---|---|---|---|---|---|');
for (const r of rows) {
  console.log(`| ${r.name} | ${cell(r, 'mv chained')} | ${cell(r, 'mv apart')} | ${cell(r, 'words chained')} | ${cell(r, 'words apart')} | ` +
              `${cell(r, 'uncapped chained')} | ${cell(r, 'uncapped apart')} | ${cell(r, 'cap256 apart')} | ${cell(r, 'cap128 apart')} | ${r['mv lanes']} / ${r['words lanes']} / ${r['uncapped lanes']} | ${r.differs ? `${r.differs} DIFFER` : 'equal'} |`);
}
