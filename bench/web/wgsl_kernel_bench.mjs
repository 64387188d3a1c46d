// One WGSL kernel at a time on the GPU under Dawn for Node (issue 45): linear_mv_wg, the WebGPU
// backend's decode matvec, on E2B QAT's one-token shapes, each dispatch repeated REPS times in one
// compute pass timed with timestamps (the best of 3 passes):
//   chained: every dispatch writes the same output (Dawn records a barrier between them: what a
//            decode step's dependent dispatches pay);
//   apart:   outputs and scratch bindings alternate over 8 buffers (no hazard, no barrier: the
//            kernel's own throughput).
// Variants: "mv" = src/backend/webgpu/wgsl/linear_mv_wg.wgsl as the backend dispatches it (its
// lanes per row, its 1,024-workgroup cap); "pro" = the same with the residual norm in its
// prologue (pro 2, writing the new residual: a decode layer's q, gate/up); "packed" = the same
// taking its input as packed codes (x_packed: the down projection after the gate/up pair's
// hand-off, no quantization in the prologue); "alt", "alt pro" =
// the same two with the kernel in the file GEMMA_MV_ALT names (a variant to compare); and
// rmsnorm_wg alone (mode 2 on one 1,536-wide row: the dispatch the prologue replaces). GB/s
// counts the weight bytes. The outputs of every variant are compared with mv's (pro's with pro's:
// equal bit for bit).
//   [GEMMA_MV_ALT=FILE] node bench/web/wgsl_kernel_bench.mjs [REPS=200] [DAWN_FLAGS=backend=vulkan] [MAX_ROWS]
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
const altSource = process.env.GEMMA_MV_ALT ? fs.readFileSync(process.env.GEMMA_MV_ALT, 'utf8') : null;

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
const pipes = { mv: pipe(mvSource), pro: null, alt: altSource && pipe(altSource), norm: pipe(wgsl('rmsnorm_wg.wgsl')) };
pipes.pro = pipes.mv;
pipes['alt pro'] = pipes.alt;
pipes.packed = pipes.mv;
const variants = ['mv', 'pro', 'packed', ...(altSource ? ['alt', 'alt pro'] : [])];
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

// The best of 3 timed passes (after one to warm up) of `reps` dispatches: chained (bind group 0
// each time) and apart (the 8 in turn), microseconds per dispatch.
async function time(p, bg, groups) {
  const qs = device.createQuerySet({ type: 'timestamp', count: 2 });
  const resolve = buffer(16, GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC);
  const read = buffer(16, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
  const res = {};
  for (const mode of ['chained', 'apart']) {
    let best = Infinity;
    for (let pass = 0; pass < 4; ++pass) {
      const enc = device.createCommandEncoder();
      const cp = enc.beginComputePass({ timestampWrites: { querySet: qs, beginningOfPassWriteIndex: 0, endOfPassWriteIndex: 1 } });
      cp.setPipeline(p);
      for (let i = 0; i < reps; ++i) {
        cp.setBindGroup(0, bg[mode === 'chained' ? 0 : i % 8]);
        cp.dispatchWorkgroups(...groups);
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
    res[mode] = best;
  }
  for (const b of [resolve, read]) b.destroy();
  qs.destroy();
  return res;
}

const rows = [];
for (const [name, R, C, kind] of shapes) {
  if (R > maxRows) continue;
  const rowWords = Math.ceil(C / PER[kind]);
  const w = filled(R * rowWords), scale = floats(R, 1 / 64), x = floats(C, (i) => ((i * 7919) % 257 - 128) * 0.021);
  const ys = Array.from({ length: 8 }, () => buffer(R * 4)), auxes = Array.from({ length: 8 }, () => buffer(16));
  // pro's residual stream (r_in, r_out, t rows of C) and norm weights
  const streams = Array.from({ length: 8 }, () => floats(3 * C, (i) => ((i * 104729) % 511 - 255) * 0.01));
  const vecs = floats(2 * C, (i) => 0.5 + (i % 7) * 0.1);
  const xw = rowWords * GROUP[kind], codes = filled(xw);  // packed's input: random codes
  const row = { name: `${name} ${R}x${C} ${kind}`, bytes: R * rowWords * 4 };
  for (const variant of variants) {
    // webgpu_backend.cc's lanes rule: ~3 16-byte vectors per invocation on rows of whole vectors,
    // else ~4 words
    let lanes = 8;
    if (rowWords % 4 === 0) {
      while (lanes < 64 && lanes * 6 <= rowWords / 4) lanes *= 2;
    } else {
      lanes = rowWords <= 32 ? 8 : rowWords <= 64 ? 16 : rowWords <= 128 ? 32 : 64;
    }
    const blocks = Math.min(Math.ceil(R / (256 / lanes)), 1024);
    const pro = variant.endsWith('pro');
    const params = new Uint32Array(64), pf = new Float32Array(params.buffer);
    params.set([R, C, rowWords, KIND[kind], 1, 0, C, 0, R, 1]);
    pf[10] = 0.02; pf[11] = 0;
    params.set([lanes, 0, 0, 0], 12);
    // pro 2: r_in row 0, r_out row 1, t row 2 of the stream; weights at 0 and C; writes r_out
    if (pro) params.set([2, 0, C, 2 * C, 0, C, 7], 18);
    pf[25] = 1; pf[26] = 1e-6;
    if (variant === 'packed') {
      params[6] = xw;
      params[30] = 1;
    }
    const ub = device.createBuffer({ size: 256, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
    device.queue.writeBuffer(ub, 0, params);
    const p = pipes[variant];
    const groups = (i) => device.createBindGroup({ layout: p.getBindGroupLayout(0), entries: [
      { binding: 0, resource: { buffer: ub } }, { binding: 1, resource: { buffer: w } },
      { binding: 2, resource: { buffer: scale } }, { binding: 3, resource: { buffer: pro ? streams[i] : variant === 'packed' ? codes : x } },
      { binding: 4, resource: { buffer: ys[i] } }, { binding: 5, resource: { buffer: auxes[i] } },
      { binding: 6, resource: { buffer: w } }, { binding: 7, resource: { buffer: scale } },
      { binding: 8, resource: { buffer: vecs } }] });
    const bg = Array.from({ length: 8 }, (_, i) => groups(i));
    Object.assign(row, Object.fromEntries(Object.entries(await time(p, bg, [Math.min(blocks, 16384), Math.ceil(blocks / 16384), 1])).map(([m, us]) => [`${variant} ${m}`, us])));
    row[`${variant} lanes`] = `${lanes} x ${blocks}`;
    // The output, against the production kernel's (the same integer sums: equal bit for bit).
    const out = buffer(R * 4, GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST);
    const enc = device.createCommandEncoder();
    enc.copyBufferToBuffer(ys[0], 0, out, 0, R * 4);
    device.queue.submit([enc.finish()]);
    await out.mapAsync(GPUMapMode.READ);
    const y = new Float32Array(out.getMappedRange().slice(0));
    out.destroy();
    const ref = pro ? 'yPro' : variant === 'packed' ? 'yPacked' : 'y';
    if (!row[ref]) row[ref] = y;
    else if (y.some((v, i) => !Object.is(v, row[ref][i]))) row.differs = (row.differs ? row.differs + ', ' : '') + variant;
  }
  rows.push(row);
  for (const b of [w, scale, x, ...ys, ...auxes, ...streams, vecs, codes]) b.destroy();
}
// rmsnorm_wg alone, mode 2 on one row of 1,536 (t into the residual, the next norm into z).
const norm = {};
{
  const C = 1536;
  const params = new Uint32Array(64), pf = new Float32Array(params.buffer);
  params.set([1, C, 0, C, 0, C, 1, 2]);
  pf[8] = 1e-6; pf[9] = 1; params[10] = 1;
  const ub = device.createBuffer({ size: 256, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(ub, 0, params);
  const t = floats(C, (i) => ((i * 7919) % 257 - 128) * 0.01), wv = floats(C, 1.1);
  const ys = Array.from({ length: 8 }, () => floats(C, 0.5)), zs = Array.from({ length: 8 }, () => buffer(C * 4));
  const bg = ys.map((y, i) => device.createBindGroup({ layout: pipes.norm.getBindGroupLayout(0), entries: [
    { binding: 0, resource: { buffer: ub } }, { binding: 1, resource: { buffer: t } }, { binding: 2, resource: { buffer: wv } },
    { binding: 3, resource: { buffer: y } }, { binding: 4, resource: { buffer: wv } }, { binding: 5, resource: { buffer: zs[i] } }] }));
  Object.assign(norm, await time(pipes.norm, bg, [1, 1, 1]));
}
if (failed) console.log(`WebGPU error: ${failed}`);
const cell = (r, k) => (r[k] === undefined ? '' : `${r[k].toFixed(2)} us (${(r.bytes / r[k] / 1e3).toFixed(0)} GB/s)`);
console.log(`\n| linear | ${variants.map((v) => `${v} chained | ${v} apart`).join(' | ')} | lanes x workgroups | outputs |`);
console.log(`|---|${variants.map(() => '---|---|').join('')}---|---|`);
for (const r of rows) {
  console.log(`| ${r.name} | ${variants.map((v) => `${cell(r, `${v} chained`)} | ${cell(r, `${v} apart`)}`).join(' | ')} | ${r['mv lanes']} | ${r.differs ? `${r.differs} DIFFER` : 'equal'} |`);
}
console.log(`\nrmsnorm_wg alone (mode 2, one row of 1,536): chained ${norm.chained.toFixed(2)} us, apart ${norm.apart.toFixed(2)} us`);
