// The WebGPU backend's workgroup kernels that have a second kernel for the same result, run on
// random shapes and data under Dawn for Node (npm `webgpu`, a test asset) on SwiftShader's Vulkan
// driver, against an independent JavaScript reference and against each other:
// - linear_tile_wg.wgsl (prompt chunks) and linear_wg.wgsl on SRQ linears: exact integer sums,
//   so both must equal the reference's f32 epilogue bit for bit (and each other with an SRQ
//   output rounding);
// - attention_wg.wgsl split over the keys (its phases 0 and 1, then attention_merge_wg.wgsl) over
//   random splits (empty ones included) and in one pass (phase 2): both within 1e-5 of a float64
//   reference (sliding windows, rings that wrap, grouped heads), and within 1e-6 of each other
//   (they add the same products in float-float).
// Skips without the package or the driver.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { check, finish, sourceDir } from './harness.mjs';


const dawnDir = path.join(sourceDir, '.cache/npm-assets/node_modules/webgpu');
const icd = '/usr/lib/chromium/vk_swiftshader_icd.json';
for (const [p, what] of [[dawnDir, 'Dawn for Node (tools/setup.sh installs the test assets)'],
                         [icd, "SwiftShader's Vulkan driver (Debian's chromium)"]]) {
  if (!fs.existsSync(p)) {
    console.log(`SKIP: no ${what} at ${p}`);
    process.exit(77);
  }
}
process.env.VK_ICD_FILENAMES = icd;  // before Dawn loads the Vulkan loader
const dawn = createRequire(import.meta.url)(dawnDir);
Object.assign(globalThis, dawn.globals);
let gpu, device;  // created after the cases are made

const dir = path.join(sourceDir, 'src/backend/webgpu/wgsl');
const prelude = fs.readFileSync(path.join(dir, 'prelude.wgsl'), 'utf8');
const pipelines = {};
function pipeline(name) {
  pipelines[name] ??= device.createComputePipeline({
    layout: 'auto',
    compute: { module: device.createShaderModule({ code: prelude + fs.readFileSync(path.join(dir, `${name}.wgsl`), 'utf8') }),
               entryPoint: 'main' } });
  return pipelines[name];
}
function storage(data) {
  const b = device.createBuffer({ size: Math.max(16, data.byteLength), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(b, 0, data);
  return b;
}
// Parameters: u32 words, floats as {f: value}.
function uniform(words) {
  const a = new ArrayBuffer(256);
  const u = new Uint32Array(a), f = new Float32Array(a);
  words.forEach((w, i) => { if (typeof w === 'object') f[i] = w.f; else u[i] = w; });
  const b = device.createBuffer({ size: 256, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(b, 0, a);
  return b;
}
// Records dispatches [name, params, buffers, [gx, gy, gz]] in one pass, as the backend does.
function run(dispatches) {
  const bound = dispatches.map(([name, params, bufs, groups]) => {
    const p = pipeline(name);
    const entries = [{ binding: 0, resource: { buffer: uniform(params) } },
                     ...bufs.map((b, i) => ({ binding: i + 1, resource: { buffer: b } }))];
    return [p, device.createBindGroup({ layout: p.getBindGroupLayout(0), entries }), groups];
  });
  const enc = device.createCommandEncoder();
  const pass = enc.beginComputePass();
  for (const [p, group, groups] of bound) {
    pass.setPipeline(p);
    pass.setBindGroup(0, group);
    pass.dispatchWorkgroups(...groups);
  }
  pass.end();
  device.queue.submit([enc.finish()]);
}
async function read(buf, bytes) {
  const s = device.createBuffer({ size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(buf, 0, s, 0, bytes);
  device.queue.submit([enc.finish()]);
  await s.mapAsync(GPUMapMode.READ);
  const out = new Float32Array(s.getMappedRange().slice(0));
  s.unmap();
  s.destroy();
  return out;
}

// A small deterministic generator (the cases are the same on every run).
let seed = 0x9e3779b9;
const rnd = () => {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
};
const int = (lo, hi) => lo + Math.floor(rnd() * (hi - lo + 1));
const pick = (a) => a[int(0, a.length - 1)];
const f32 = Math.fround;
// transformers' SRQ code of f32 z with f32 scale s: clamp(round_half_even(z / s), -128, 127) of
// the exact quotient (2z - (2k + 1) s is exact in float64).
function srqCode(z, s) {
  const k = Math.floor(z / s);
  const d = 2 * z - (2 * k + 1) * s;
  const r = d > 0 ? k + 1 : d < 0 ? k : (k % 2 === 0 ? k : k + 1);
  if (r === 0) return z < 0 || Object.is(z, -0) ? -0 : 0;  // rounding keeps the sign, as torch's
  return Math.min(127, Math.max(-128, r));
}

// Every case's data and reference are made first, then the GPU runs them all, then the results
// are compared.

// ---- SRQ linears: linear_tile_wg and linear_wg against the integer reference.
const KIND = { q2: 3, q4: 4, q8: 5 };
const BITS = { q2: 2, q4: 4, q8: 8 };
const linearCases = [];
for (let c = 0; c < 14; ++c) {
  const kind = pick(['q2', 'q4', 'q8']);
  const rows = int(1, 150), cols = c < 3 ? pick([64, 128, 192]) : int(1, 300);
  const n = c === 0 ? 64 : int(1, 100);
  const bits = BITS[kind], per = 32 / bits;
  const rowWords = Math.ceil(cols / per);
  const lo = kind === 'q8' ? -128 : -(1 << (bits - 1)), hi = -lo - 1;
  // Weights: codes in their stored form (offset binary for 2 and 4 bits), padding bytes zero.
  const codes = new Int32Array(rows * cols);
  const w = new Uint32Array(rows * rowWords);
  for (let r = 0; r < rows; ++r) {
    for (let k = 0; k < cols; ++k) {
      const v = int(lo, hi);
      codes[r * cols + k] = v;
      const stored = kind === 'q8' ? v & 0xff : v - lo;
      w[r * rowWords + Math.floor(k / per)] |= stored << (bits * (k % per));
    }
  }
  const scale = new Float32Array(rows).map(() => f32(0.5 + rnd()) / 64);
  const xStride = cols + int(0, 5), xOff = int(0, 7);
  const x = new Float32Array(xOff + n * xStride);
  for (let t = 0; t < n; ++t) for (let k = 0; k < cols; ++k) x[xOff + t * xStride + k] = int(-128, 127);
  const inScale = f32(0.01 + rnd() * 0.02);
  const yStride = rows + int(0, 3), yOff = int(0, 5);
  const outScale = c % 2 ? f32(0.001 + rnd() * 0.01) : 0;
  const want = new Float32Array(n * rows);
  for (let t = 0; t < n; ++t) {
    for (let r = 0; r < rows; ++r) {
      let sum = 0;
      for (let k = 0; k < cols; ++k) sum += codes[r * cols + k] * x[xOff + t * xStride + k];
      let v = f32(f32(f32(sum) * inScale) * scale[r]);
      if (outScale > 0) v = f32(srqCode(v, outScale) * outScale);
      want[t * rows + r] = v;
    }
  }
  const what = `${kind} ${rows}x${cols}, ${n} tokens, out_scale ${outScale}`;
  linearCases.push({ what, rows, n, yOff, yStride, want, kind, rowWords, cols, xOff, xStride, inScale, outScale, w, scale, x });
}

// ---- Attention: the split kernels and attention_wg against a float64 reference.
const attnCases = [];
for (let c = 0; c < 12; ++c) {
  const hd = pick([8, 16, 24, 64, 256]);
  const kvHeads = int(1, 2), group = pick([1, 2, 4]);
  const heads = kvHeads * group;
  const n = int(1, 6);
  const window = rnd() < 0.5 ? int(4, 40) : 0;
  const pos0 = int(0, 90);
  const ring = window > 0 ? window + int(n, n + 8) : pos0 + n + int(0, 4);
  const kvWidth = kvHeads * hd;
  const kc = new Float32Array(ring * kvWidth).map(() => f32(rnd() * 2 - 1));
  const vc = new Float32Array(ring * kvWidth).map(() => f32(rnd() * 2 - 1));
  const q = new Float32Array(n * heads * hd).map(() => f32((rnd() * 2 - 1) * 0.7));
  const keysMax = window > 0 ? Math.min(pos0 + n, window) : pos0 + n;
  const chunk = int(1, Math.max(1, Math.ceil(keysMax / 2)));
  const splits = Math.ceil(keysMax / chunk) + int(0, 2);  // trailing splits may be empty
  const want = new Float64Array(n * heads * hd);
  for (let t = 0; t < n; ++t) {
    const pos = pos0 + t;
    const first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
    for (let h = 0; h < heads; ++h) {
      const kvo = Math.floor(h / group) * hd, qo = (t * heads + h) * hd;
      const sc = [];
      for (let j = first; j <= pos; ++j) {
        let d = 0;
        for (let i = 0; i < hd; ++i) d += q[qo + i] * kc[(j % ring) * kvWidth + kvo + i];
        sc.push(d);
      }
      const m = Math.max(...sc);
      const e = sc.map((v) => Math.exp(v - m));
      const sum = e.reduce((u, v) => u + v, 0);
      for (let i = 0; i < hd; ++i) {
        let o = 0;
        e.forEach((ej, k) => { o += ej * vc[((first + k) % ring) * kvWidth + kvo + i]; });
        want[qo + i] = o / sum;
      }
    }
  }
  const what = `attention hd ${hd}, ${heads} heads / ${kvHeads} kv, ${n} tokens at ${pos0}, window ${window}, ring ${ring}, ${splits} splits of ${chunk}`;
  attnCases.push({ what, hd, heads, group, kvWidth, n, pos0, window, ring, kc, vc, q, chunk, splits, want });
}

// The GPU.
gpu = dawn.create(['backend=vulkan']);
// The adapter stays referenced: Dawn for Node 0.6.2 crashed (a freed mutex in
// Instance::ProcessEvents) or hung once it had been collected.
const adapter = await gpu.requestAdapter();
device = await adapter.requestDevice();
globalThis.keepAlive = [gpu, adapter, device];
device.onuncapturederror = (e) => check(false, `WebGPU error: ${e.error.message}`);
for (const L of linearCases) {
  const { rows, cols, rowWords, kind, n, xOff, xStride, yOff, yStride, inScale, outScale } = L;
  const ybytes = (yOff + n * yStride) * 4;
  const wb = storage(L.w), sb = storage(L.scale), xb = storage(L.x);
  const yTile = storage(new Float32Array(ybytes / 4)), yWg = storage(new Float32Array(ybytes / 4));
  const params = [rows, cols, rowWords, KIND[kind], n, xOff, xStride, yOff, yStride, 1, { f: inScale }, { f: outScale }];
  // linear_wg on the first (at most 8) tokens: the engine gives it prompt chunks below the tile
  // kernel's size only.
  L.nWg = Math.min(n, 8);
  const paramsWg = [...params];
  paramsWg[4] = L.nWg;
  const blocks = Math.ceil(rows / 4);
  run([['linear_tile_wg', params, [wb, sb, xb, yTile], [Math.ceil(rows / 64), Math.ceil(n / 64), 1]],
       ['linear_wg', paramsWg, [wb, sb, xb, yWg], [Math.min(blocks, 16384), Math.ceil(blocks / 16384), Math.ceil(L.nWg / 4)]]]);
  L.tile = await read(yTile, ybytes);
  L.wg = await read(yWg, ybytes);
}
for (const A of attnCases) {
  const { hd, heads, group, kvWidth, n, pos0, window, ring, chunk, splits } = A;
  const rowsN = n * heads;
  const qb = storage(A.q), kb = storage(A.kc), vb = storage(A.vc);
  const oSplit = storage(new Float32Array(rowsN * hd)), oWg = storage(new Float32Array(rowsN * hd));
  const mx = storage(new Float32Array(rowsN * splits));
  const part = storage(new Float32Array(rowsN * splits * (2 + 2 * hd)));
  const base = [n, heads, hd, group, kvWidth, pos0, window, ring];
  const sink = storage(new Float32Array(4));
  run([['attention_wg', [...base, splits, chunk, 0], [qb, kb, vb, mx, part], [splits, heads, n]],
       ['attention_wg', [...base, splits, chunk, 1], [qb, kb, vb, mx, part], [splits, heads, n]],
       ['attention_merge_wg', [n, heads, hd, splits], [part, oSplit], [heads, n, 1]],
       ['attention_wg', [...base, 1, 0, 2], [qb, kb, vb, oWg, sink], [heads, n, 1]]]);
  A.split = await read(oSplit, rowsN * hd * 4);
  A.wg = await read(oWg, rowsN * hd * 4);
}
device.destroy();

// The comparisons.
for (const L of linearCases) {
  let bad = 0, badRef = 0, example = '';
  for (let t = 0; t < L.n; ++t) {
    for (let r = 0; r < L.rows; ++r) {
      const i = L.yOff + t * L.yStride + r;
      if (t < L.nWg && !Object.is(L.tile[i], L.wg[i])) ++bad;
      if (!Object.is(L.tile[i], L.want[t * L.rows + r])) {
        if (!badRef++) example = ` (token ${t} row ${r}: ${L.tile[i]}, want ${L.want[t * L.rows + r]})`;
      }
    }
  }
  check(bad === 0, `${L.what}: ${bad} outputs of linear_tile_wg differ from linear_wg's`);
  check(badRef === 0, `${L.what}: ${badRef} outputs of linear_tile_wg differ from the integer reference${example}`);
}
console.log(`linear_tile_wg: ${linearCases.length} random SRQ linears against linear_wg and the integer reference`);
let worstSplit = 0, worstPair = 0;
for (const A of attnCases) {
  let errSplit = 0, errPair = 0;
  for (let r = 0; r < A.n * A.heads; ++r) {
    let num = 0, numWg = 0, den = 0, pair = 0;
    for (let i = 0; i < A.hd; ++i) {
      const o = A.want[r * A.hd + i];
      num += (A.split[r * A.hd + i] - o) ** 2;
      numWg += (A.wg[r * A.hd + i] - o) ** 2;
      pair += (A.split[r * A.hd + i] - A.wg[r * A.hd + i]) ** 2;
      den += o * o;
    }
    den = Math.max(den, 1e-30);
    errSplit = Math.max(errSplit, Math.sqrt(num / den), Math.sqrt(numWg / den));
    errPair = Math.max(errPair, Math.sqrt(pair / den));
  }
  check(errSplit <= 1e-5, `${A.what}: ${errSplit} from the float64 reference (rel L2)`);
  check(errPair <= 1e-6, `${A.what}: split and one pass differ by ${errPair} (rel L2)`);
  worstSplit = Math.max(worstSplit, errSplit);
  worstPair = Math.max(worstPair, errPair);
}
console.log(`attention_wg split over the keys: ${attnCases.length} random cases, worst rel L2 ${worstSplit.toExponential(2)} from float64, ${worstPair.toExponential(2)} from one pass`);

finish('web_wgsl_kernels_test');
process.exit(0);  // Dawn for Node can crash in its teardown at a natural exit
