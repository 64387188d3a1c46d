// The WebGPU backend's workgroup kernels that have a second kernel for the same result, run on
// random shapes and data under Dawn for Node (npm `webgpu`, a test asset) on SwiftShader's Vulkan
// driver, against an independent JavaScript reference and against each other:
// - linear_tile_wg.wgsl (prompt chunks; in one pass and split over the columns, its input codes
//   packed by quant.wgsl) and linear_wg.wgsl on SRQ linears: exact integer sums, so all must
//   equal the reference's f32 epilogue bit for bit (and each other with an SRQ output rounding);
// - linear_dense_tile_wg.wgsl (prompt chunks of dense linears): within 2^-21 of the sum of the
//   products' magnitudes from a float64 reference (linear_wg's bound, doubled);
// - attention_wg.wgsl split over the keys (its phase 1, then attention_merge_wg.wgsl) over
//   random splits (empty ones included) and in one pass (phase 2): both within 1e-5 of a float64
//   reference (sliding windows, rings that wrap, grouped heads), and within 1e-6 of each other
//   (the same products in float-float; the splits' weights relative to their own maxima);
// - attention_prompt_wg.wgsl (prompt chunks: up to 8 query heads of a key/value head per
//   workgroup) within the same bounds of float64 and of attention_wg's one pass;
// - ple_combine.wgsl's decoding of the stored per-layer embedding rows (every kind), bit for bit
//   EmbeddingRow's values;
// - the workgroup family with subgroup reductions (prelude_subgroups.wgsl in place of
//   prelude_workgroup.wgsl; SwiftShader's subgroups have 4 invocations, so a workgroup of 64 has
//   16): linear_wg on SRQ inputs bit for bit the integer reference, linear_wg on dense and
//   quantized rows without SRQ inputs, rmsnorm_wg (modes 0, 1, 2), head_norm_wg and both
//   attentions within the float bounds above of float64 and of the same kernels without
//   subgroups.
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
// The reductions themselves, through a kernel of the test's own: workgroup x sums its 64 (hi, lo)
// pairs with ff_workgroup_sum and takes the maximum of the hi with workgroup_max.
const testKernels = {
  reduce: `@group(0) @binding(0) var<uniform> base: vec4<u32>;  // 0: the run() helper's parameters
@group(0) @binding(1) var<storage, read> v: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let x = v[base.x + wg.x * 64u + li];
  let s = ff_workgroup_sum(x, li);
  let m = workgroup_max(x.x, li);
  if (li == 0u) {
    o[wg.x * 3u] = s.x;
    o[wg.x * 3u + 1u] = s.y;
    o[wg.x * 3u + 2u] = m;
  }
}
`,
};
const source = (f) => testKernels[f.replace(/\.wgsl$/, '')] ?? fs.readFileSync(path.join(dir, f), 'utf8');
const pipelines = {};
// name: a kernel, with the workgroup family's reductions (prelude_workgroup.wgsl), or "sg:" and a
// kernel, with the subgroup reductions (prelude_subgroups.wgsl), as webgpu_backend.cc composes them.
function pipeline(name) {
  const [family, kernel] = name.startsWith('sg:') ? ['prelude_subgroups', name.slice(3)] : ['prelude_workgroup', name];
  pipelines[name] ??= device.createComputePipeline({
    layout: 'auto',
    compute: { module: device.createShaderModule({ code: source(`${family}.wgsl`) + source('prelude.wgsl') + source(`${kernel}.wgsl`) }),
               entryPoint: 'main' } });
  return pipelines[name];
}
function storage(data) {
  // (16-byte multiples, as the backend pads weights: linear_mv_wg binds them as vec4<u32>)
  const b = device.createBuffer({ size: Math.max(16, Math.ceil(data.byteLength / 16) * 16), usage: GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST });
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
// Random SRQ weights: the codes, and the rows as stored (offset binary for 2 and 4 bits, whole
// u32 words, padding bytes zero).
function srqWeights(kind, rows, cols) {
  const bits = BITS[kind], per = 32 / bits;
  const rowWords = Math.ceil(cols / per);
  const lo = kind === 'q8' ? -128 : -(1 << (bits - 1)), hi = -lo - 1;
  const codes = new Int32Array(rows * cols);
  const w = new Uint32Array(rows * rowWords);
  for (let r = 0; r < rows; ++r) {
    for (let k = 0; k < cols; ++k) {
      const v = int(lo, hi);
      codes[r * cols + k] = v;
      w[r * rowWords + Math.floor(k / per)] |= (kind === 'q8' ? v & 0xff : v - lo) << (bits * (k % per));
    }
  }
  return { codes, w, rowWords };
}
// The SRQ linear's outputs from its weight codes and input codes (xcode(t, k)): the exact integer
// sum, times the input and row scales in f32, then the output rounding when outScale > 0.
function srqReference(codes, xcode, n, rows, cols, inScale, scale, outScale) {
  const want = new Float32Array(n * rows);
  for (let t = 0; t < n; ++t) {
    for (let r = 0; r < rows; ++r) {
      let sum = 0;
      for (let k = 0; k < cols; ++k) sum += codes[r * cols + k] * xcode(t, k);
      let v = f32(f32(f32(sum) * inScale) * scale[r]);
      if (outScale > 0) v = f32(srqCode(v, outScale) * outScale);
      want[t * rows + r] = v;
    }
  }
  return want;
}
const linearCases = [];
for (let c = 0; c < 14; ++c) {
  const kind = pick(['q2', 'q4', 'q8']);
  // Cases 3 and 4: rows wide enough that every invocation of linear_wg holds words of them.
  const rows = int(1, 150), cols = c < 3 ? pick([64, 128, 192]) : c < 5 ? int(1100, 1400) : int(1, 300);
  const n = c === 0 ? 64 : c < 5 ? int(1, 12) : int(1, 100);
  const { codes, w, rowWords } = srqWeights(kind, rows, cols);
  const scale = new Float32Array(rows).map(() => f32(0.5 + rnd()) / 64);
  const xStride = cols + int(0, 5), xOff = int(0, 7);
  const x = new Float32Array(xOff + n * xStride);
  for (let t = 0; t < n; ++t) for (let k = 0; k < cols; ++k) x[xOff + t * xStride + k] = int(-128, 127);
  const inScale = f32(0.01 + rnd() * 0.02);
  const yStride = rows + int(0, 3), yOff = int(0, 5);
  const outScale = c % 2 ? f32(0.001 + rnd() * 0.01) : 0;
  const want = srqReference(codes, (t, k) => x[xOff + t * xStride + k], n, rows, cols, inScale, scale, outScale);
  const what = `${kind} ${rows}x${cols}, ${n} tokens, out_scale ${outScale}`;
  linearCases.push({ what, rows, n, yOff, yStride, want, kind, rowWords, cols, xOff, xStride, inScale, outScale, w, scale, x });
}

// ---- linear_mv_wg (decode steps): f32 inputs quantized in the kernel, against the same integer
// reference with transformers' SRQ codes of the inputs (srqCode): bit for bit. Inputs include
// quotients exactly halfway between two codes, codes past the clamp, and rows as wide as E2B's
// double-wide down projection for one token.
const mvCases = [];
for (let c = 0; c < 16; ++c) {
  const kind = ['q2', 'q4', 'q8'][c % 3];
  const bits = BITS[kind], per = 32 / bits;
  const group = { q2: 4, q4: 2, q8: 1 }[kind];
  const n = c < 4 ? 1 : int(1, 4);
  const cols = c === 0 ? 12288 : c === 1 ? 6144 : c === 2 ? 1536 : int(1, 600);
  const rowWords = Math.ceil(cols / per);
  if (n * rowWords * group > 3072) continue;  // the backend gives these to quant + linear_wg
  const rows = c < 3 ? int(1, 40) : int(1, 300);
  const lanes = pick([8, 16, 32, 64]);
  const { codes, w } = srqWeights(kind, rows, cols);
  const scale = new Float32Array(rows).map(() => f32(0.5 + rnd()) / 64);
  const inScale = f32(0.01 + rnd() * 0.02);
  const xStride = cols + int(0, 5), xOff = int(0, 7);
  const x = new Float32Array(xOff + n * xStride);
  const xq = new Int32Array(n * cols);
  for (let t = 0; t < n; ++t) {
    for (let k = 0; k < cols; ++k) {
      const u = rnd();
      const v = u < 0.15 ? f32((int(-130, 130) + 0.5) * inScale)   // halfway (as near as f32 gets)
              : u < 0.2 ? f32((rnd() < 0.5 ? -1 : 1) * (129 + rnd() * 50) * inScale)  // clamped
              : f32((rnd() * 2 - 1) * 100 * inScale);
      x[xOff + t * xStride + k] = v;
      xq[t * cols + k] = srqCode(v, inScale);
    }
  }
  const yStride = rows + int(0, 3), yOff = int(0, 5);
  const outScale = c % 2 ? f32(0.001 + rnd() * 0.01) : 0;
  const want = srqReference(codes, (t, k) => xq[t * cols + k], n, rows, cols, inScale, scale, outScale);
  // The fused epilogues (1: aux = gelu(aux) * y, 2: y = gelu(y) * aux) against linear_mv_wg's
  // plain output followed by gelu_mul.wgsl, bit for bit; the layouts gelu_mul takes (its `a` rows
  // are packed).
  const epi = int(1, 2);
  const auxOff = epi === 2 ? int(0, 9) : 0, auxStride = epi === 2 ? rows + int(0, 4) : rows;
  const aux = new Float32Array(auxOff + n * auxStride).map(() => f32((rnd() * 2 - 1) * 3));
  // The pair (epilogue 3): an up projection of the same shape beside this one as the gate, its
  // input quantized with its own scale in half the cases (where both inputs fit workgroup memory).
  const up = srqWeights(kind, rows, cols);
  const scale2 = new Float32Array(rows).map(() => f32(0.5 + rnd()) / 64);
  const inScale2 = c % 4 < 2 || 2 * n * rowWords * group > 3072 ? inScale : f32(0.01 + rnd() * 0.02);
  const outScale2 = c % 3 ? f32(0.001 + rnd() * 0.01) : 0;
  // Workgroups: one per block of rows, or fewer (webgpu.matvecWorkgroups), each looping over
  // blocks, in two of three cases.
  const blocks = Math.ceil(rows / (256 / lanes));
  const grid = c % 3 === 0 || blocks === 1 ? blocks : int(1, blocks - 1);
  mvCases.push({ what: `linear_mv_wg ${kind} ${rows}x${cols}, ${n} tokens, ${lanes} lanes, ${grid} of ${blocks} workgroups, out_scale ${outScale}`,
                 rows, cols, rowWords, kind, n, lanes, xOff, xStride, yOff, yStride, inScale, outScale, w, scale, x, want,
                 epi, auxOff, auxStride, aux, grid, w2: up.w, scale2, inScale2, outScale2 });
}

// ---- Attention: the split kernels and attention_wg against a float64 reference.
const attnCases = [];
for (let c = 0; c < 12; ++c) {
  // Cases 10 and 11: a head_dim with single products after the blocks of 8; case 11: more keys
  // than the one pass keeps (2,048), the rest scored again.
  const hd = c >= 10 ? [20, 12][c - 10] : pick([8, 16, 24, 64, 256]);
  // (cases 8 and 9: more query heads per key/value head than attention_prompt_wg's set of 8)
  const kvHeads = int(1, 2), group = c === 8 ? 12 : c === 9 ? 9 : pick([1, 2, 4, 8]);
  const heads = kvHeads * group;
  const n = c < 2 ? int(8, 12) : int(1, 6);
  const window = c === 11 ? 0 : rnd() < 0.5 ? int(4, 40) : 0;
  const pos0 = c === 11 ? int(2050, 2150) : int(0, 90);
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
  // The query head norm inside the attention (q_norm): raw rows, weights (or none) and a RoPE table.
  const qRaw = new Float32Array(n * heads * hd).map(() => f32((rnd() * 2 - 1) * 3));
  const qw = new Float32Array(hd).map(() => f32(rnd() * 2));
  const cs = new Float32Array(n * hd).map(() => f32(rnd() * 2 - 1));
  attnCases.push({ what, hd, heads, group, kvWidth, n, pos0, window, ring, kc, vc, q, chunk, splits, want,
                   qRaw, qw, cs, hasW: c % 3 ? 1 : 0 });
}

// ---- ff_workgroup_sum and workgroup_max themselves: 64 float-float pairs per workgroup over a wide
// range of magnitudes, with cancellations (x and -x), against the exact sum (BigInt, in units of
// 2^-200): the error within 2^-40 of the sum of the magnitudes (float-float's ~44 bits; an f32 sum
// would be ~2^-24 off), the maximum exact.
const reduceCases = [];
const toBig = (v) => {  // an f32 (or a float64 sum of two) exactly, in units of 2^-200
  const e = Math.floor(Math.log2(Math.abs(v))) - 60;
  return v === 0 ? 0n : BigInt(v / 2 ** e) * (e + 200 >= 0 ? 2n ** BigInt(e + 200) : 1n) / (e + 200 < 0 ? 2n ** BigInt(-e - 200) : 1n);
};
for (let c = 0; c < 24; ++c) {
  const span = pick([0, 8, 24, 40]), base = int(-30, 30);
  const v = new Float32Array(128);
  for (let i = 0; i < 64; ++i) {
    let hi = f32((rnd() < 0.5 ? -1 : 1) * (1 + rnd()) * 2 ** (base + int(0, span)));
    if (c % 3 === 1 && i % 2 === 1) hi = -v[2 * (i - 1)];  // cancelling pairs
    const ulp = 2 ** (Math.floor(Math.log2(Math.abs(hi))) - 23);
    v[2 * i] = hi;
    v[2 * i + 1] = f32((rnd() - 0.5) * ulp);
  }
  let exact = 0n, mag = 0, max = -Infinity;
  for (let i = 0; i < 128; ++i) {
    exact += toBig(v[i]);
    mag += Math.abs(v[i]);
    if (i % 2 === 0) max = Math.max(max, v[i]);
  }
  reduceCases.push({ v, exact, mag, max });
}
// An infinite partial, and a NaN one: NaN sums in both families (TwoSum of an infinity is NaN),
// the maximum the infinity (NaN's maximum is not compared).
for (const special of [Infinity, NaN]) {
  const v = new Float32Array(128).map((_, i) => (i % 2 ? 0 : f32(rnd())));
  v[2 * int(0, 63)] = special;
  reduceCases.push({ v, special });
}

// ---- linear_wg on rows without SRQ inputs (dense kinds, quantized codes times a row scale):
// float-float sums, against float64 (the products are f32 products, exact in float64).
const DENSE = { f32: 0, bf16: 1, f16: 2, q2: 3, q4: 4, q8: 5 };
const f16Bits = (v) => {  // a value in (-1, 1) -> an f16's bits: one near it, or 0 below f16's normal range
  const a = Math.abs(v), sign = v < 0 || Object.is(v, -0) ? 0x8000 : 0;
  if (a < 2 ** -14) return sign;
  let e = Math.floor(Math.log2(a));
  let m = Math.round((a / 2 ** e - 1) * 1024);
  if (m === 1024) { m = 0; ++e; }
  return sign | ((e + 15) << 10) | m;
};
const f16Value = (h) => (h & 0x7fff ? (h & 0x8000 ? -1 : 1) * 2 ** (((h >> 10) & 31) - 15) * (1 + (h & 1023) / 1024) : 0);
// A linear without an SRQ input and its float64 reference (the sum of the f32 products, and the
// sum of their magnitudes for the bounds).
function denseCase(kind, rows, cols, n, name) {
  const quant = DENSE[kind] >= 3;
  const per = { f32: 1, bf16: 2, f16: 2, q2: 16, q4: 8, q8: 4 }[kind];
  const rowWords = Math.ceil(cols / per);
  const w = new Uint32Array(rows * rowWords);
  const wv = new Float64Array(rows * cols);  // the weights' values (codes for quantized kinds)
  const u32 = new Uint32Array(1), fl = new Float32Array(u32.buffer);
  for (let r = 0; r < rows; ++r) {
    for (let k = 0; k < cols; ++k) {
      const wi = r * rowWords + Math.floor(k / per), slot = k % per;
      if (kind === 'f32') {
        fl[0] = rnd() * 2 - 1;
        w[wi] = u32[0];
        wv[r * cols + k] = fl[0];
      } else if (kind === 'bf16') {
        fl[0] = rnd() * 2 - 1;
        const h = u32[0] >>> 16;
        w[wi] |= h << (16 * slot);
        u32[0] = h << 16;
        wv[r * cols + k] = fl[0];
      } else if (kind === 'f16') {
        const h = f16Bits(rnd() * 2 - 1);
        w[wi] |= h << (16 * slot);
        wv[r * cols + k] = f16Value(h);
      } else {
        const bits = 32 / per, lo = kind === 'q8' ? -128 : -(1 << (bits - 1));
        const v = int(lo, -lo - 1);
        w[wi] |= (kind === 'q8' ? v & 0xff : v - lo) << (bits * slot);
        wv[r * cols + k] = v;
      }
    }
  }
  const scale = new Float32Array(rows).map(() => f32(0.5 + rnd()) / 64);
  const xStride = cols + int(0, 3), xOff = int(0, 3);
  const x = new Float32Array(xOff + n * xStride).map(() => f32(rnd() * 2 - 1));
  const yStride = rows + int(0, 3), yOff = int(0, 3);
  const want = new Float64Array(n * rows), mag = new Float64Array(n * rows);
  for (let t = 0; t < n; ++t) {
    for (let r = 0; r < rows; ++r) {
      let sum = 0, abs = 0;
      for (let k = 0; k < cols; ++k) {
        const prod = f32(wv[r * cols + k] * x[xOff + t * xStride + k]);  // the kernel's f32 product
        sum += prod;
        abs += Math.abs(prod);
      }
      want[t * rows + r] = quant ? sum * scale[r] : sum;
      mag[t * rows + r] = quant ? abs * scale[r] : abs;
    }
  }
  const what = `${name} ${kind} ${rows}x${cols}, ${n} tokens`;
  return { what, rows, cols, n, kind, rowWords, w, scale, x, xOff, xStride, yOff, yStride, want, mag };
}
const denseCases = [];
for (let c = 0; c < 8; ++c) {
  const kind = ['f32', 'bf16', 'f16', 'q4', 'q8', 'q2', 'f32', 'bf16'][c];
  denseCases.push(denseCase(kind, int(1, 70), int(1, 400), int(1, 8), 'linear_wg'));
}
// linear_dense_tile_wg (prompt chunks of 16+ tokens): several row and token tiles, ragged edges,
// and one row as long as E2B's hidden size.
const denseTileCases = [];
for (let c = 0; c < 8; ++c) {
  const kind = ['bf16', 'f32', 'f16', 'q4', 'q8', 'q2', 'bf16', 'f16'][c];
  const cols = c === 0 ? 1536 : c === 1 ? 32 : int(1, 300);
  denseTileCases.push(denseCase(kind, c === 0 ? 70 : int(1, 80), cols, c === 0 ? 16 : int(16, 70), 'linear_dense_tile_wg'));
}

// ---- rmsnorm_wg (modes 0, 1, 2) and head_norm_wg against float64.
const normCases = [];
for (let c = 0; c < 6; ++c) {
  const mode = c % 3, rows = int(1, 5), width = pick([1, 7, 64, 100, 256, 1536, 2048]);
  const xStride = width + int(0, 3), xOff = int(0, 3), yStride = width, yOff = int(0, 3);
  const x = new Float32Array(xOff + rows * xStride).map(() => f32((rnd() * 2 - 1) * 3));
  const w = new Float32Array(width).map(() => f32(rnd() * 2));
  const w2 = new Float32Array(width).map(() => f32(rnd() * 2));
  const y0 = new Float32Array(yOff + rows * yStride).map(() => f32(rnd() * 2 - 1));
  const eps = 1e-6, scale = mode ? f32(0.5 + rnd()) : 1;
  const wantY = new Float64Array(rows * width), wantZ = new Float64Array(rows * width);
  const norm = (v) => 1 / Math.sqrt(v.reduce((a, b) => a + b * b, 0) / width + eps);
  for (let r = 0; r < rows; ++r) {
    const xr = Array.from(x.subarray(xOff + r * xStride, xOff + r * xStride + width));
    const inv = norm(xr);
    const yr = xr.map((v, i) => v * inv * w[i]).map((v, i) => (mode ? (y0[yOff + r * yStride + i] + v) * scale : v));
    yr.forEach((v, i) => { wantY[r * width + i] = v; });
    const inv2 = norm(yr.map(f32));
    yr.forEach((v, i) => { wantZ[r * width + i] = f32(v) * inv2 * w2[i]; });
  }
  normCases.push({ what: `rmsnorm_wg mode ${mode}, ${rows} x ${width}`, mode, rows, width, x, w, w2, y0, eps, scale,
                   xOff, xStride, yOff, yStride, wantY, wantZ });
}
const headCases = [];
for (let c = 0; c < 4; ++c) {
  const hd = pick([8, 64, 256, 512]), heads = int(1, 4), n = int(1, 3);
  const rope = c % 2, toCache = c >= 2 ? 1 : 0, hasW = c !== 1 ? 1 : 0;
  const ring = n + int(0, 5), pos0 = int(0, 20), csOff = 0;
  const width = heads * hd, half = hd / 2;
  const src = new Float32Array(n * width).map(() => f32((rnd() * 2 - 1) * 2));
  const w = new Float32Array(hd).map(() => f32(rnd() * 2));
  const cs = new Float32Array(n * hd);
  for (let t = 0; t < n; ++t) {
    for (let i = 0; i < half; ++i) {
      const a = (pos0 + t) / 10000 ** (i / half);
      cs[t * hd + i] = f32(Math.cos(a));
      cs[t * hd + half + i] = f32(Math.sin(a));
    }
  }
  const dstLen = toCache ? ring * width : n * width;
  const want = new Float64Array(dstLen).fill(NaN);
  for (let t = 0; t < n; ++t) {
    for (let h = 0; h < heads; ++h) {
      const sb = t * width + h * hd;
      const db = toCache ? ((pos0 + t) % ring) * width + h * hd : sb;
      let ss = 0;
      for (let i = 0; i < hd; ++i) ss += src[sb + i] ** 2;
      const inv = 1 / Math.sqrt(ss / hd + 1e-6);
      for (let i = 0; i < half; ++i) {
        let a = src[sb + i] * inv * (hasW ? w[i] : 1), b = src[sb + i + half] * inv * (hasW ? w[i + half] : 1);
        if (rope) [a, b] = [a * cs[t * hd + i] - b * cs[t * hd + half + i], b * cs[t * hd + i] + a * cs[t * hd + half + i]];
        want[db + i] = a;
        want[db + i + half] = b;
      }
    }
  }
  headCases.push({ what: `head_norm_wg hd ${hd}, ${heads} heads, ${n} tokens, rope ${rope}, to cache ${toCache}, weights ${hasW}`,
                   hd, heads, n, rope, toCache, hasW, ring, pos0, csOff, src, w, cs, dstLen, want });
}

// ---- ple_combine: the token-identity rows decoded from the stored rows (every kind) bit for bit
// as EmbeddingRow decodes them: with a zero model projection the output is f32(row value x
// input_scale), row value = f32(f32(code x block scale) x embed_scale) (or the stored value x
// embed_scale).
const pleCases = [];
for (const kind of ['f32', 'bf16', 'f16', 'q8', 'q4', 'q2']) {
  const n = int(1, 4), layers = int(1, 4), width = int(4, 40), cols = layers * width;
  const per = { f32: 1, bf16: 2, f16: 2, q8: 4, q4: 8, q2: 16 }[kind];
  const quant = DENSE[kind] >= 3;
  const blocks = quant ? pick([1, layers]) : 0;
  const rowWords = Math.ceil(cols / per), stride = rowWords + blocks;
  const tok = new Uint32Array(n * stride);
  const fl = new Float32Array(1), u32 = new Uint32Array(fl.buffer);
  const embedScale = f32(1 + rnd() * 3), inputScale = f32(Math.SQRT1_2);
  const want = new Float32Array(n * cols);
  for (let t = 0; t < n; ++t) {
    const sc = [];
    for (let b = 0; b < blocks; ++b) {
      sc.push(f32(0.01 + rnd() * 0.1));
      fl[0] = sc[b];
      tok[t * stride + rowWords + b] = u32[0];
    }
    for (let i = 0; i < cols; ++i) {
      const wi = t * stride + Math.floor(i / per), slot = i % per;
      let v;
      if (kind === 'f32') {
        fl[0] = rnd() * 2 - 1;
        tok[wi] = u32[0];
        v = fl[0];
      } else if (kind === 'bf16') {
        fl[0] = rnd() * 2 - 1;
        const h = u32[0] >>> 16;
        tok[wi] |= h << (16 * slot);
        u32[0] = h << 16;
        v = fl[0];
      } else if (kind === 'f16') {
        const h = f16Bits(rnd() * 2 - 1);
        tok[wi] |= h << (16 * slot);
        v = f16Value(h);
      } else {
        const bits = 32 / per, lo = kind === 'q8' ? -128 : -(1 << (bits - 1));
        const c = int(lo, -lo - 1);
        tok[wi] |= (kind === 'q8' ? c & 0xff : c - lo) << (bits * slot);
        v = f32(c * sc[Math.floor(i / (cols / blocks))]);
      }
      want[t * cols + i] = f32(f32(v * embedScale) * inputScale);
    }
  }
  pleCases.push({ what: `ple_combine ${kind}, ${n} tokens x ${layers} layers x ${width}, ${blocks} scale blocks`, kind, n, layers, width,
                  cols, rowWords, stride, blocks, tok, embedScale, inputScale, want });
}

// ---- argmax_wg: a row whole (stage 2) and cut into slices (stages 0 and 1) against a JavaScript
// scan: the largest number, the lowest id among equal ones, NaN never, id 0 for a row of NaN.
const argmaxCases = [];
for (let c = 0; c < 8; ++c) {
  const rows = int(1, 3), vocab = c === 0 ? 1 : int(2, 5000), parts = pick([1, 2, 7, 64, 256]);
  const z = new Float32Array(rows * vocab).map(() => f32(int(-20, 20) / 4));  // many ties
  for (let i = 0; i < z.length; ++i) if (rnd() < 0.05) z[i] = NaN;
  if (c === 1) z.fill(NaN, 0, vocab);  // a row of NaN
  if (c === 2) z.fill(-Infinity);
  const want = [];
  for (let r = 0; r < rows; ++r) {
    let bi = -1;
    for (let i = 0; i < vocab; ++i) {
      const v = z[r * vocab + i];
      if (v === v && (bi < 0 || v > z[r * vocab + bi])) bi = i;
    }
    want.push(Math.max(bi, 0));
  }
  argmaxCases.push({ what: `argmax_wg ${rows} x ${vocab} in ${parts} parts`, rows, vocab, parts, z, want });
}

// The GPU.
gpu = dawn.create(['backend=vulkan']);
// The adapter stays referenced: Dawn for Node 0.6.2 crashed (a freed mutex in
// Instance::ProcessEvents) or hung once it had been collected.
const adapter = await gpu.requestAdapter();
const subgroups = adapter.features.has('subgroups');
device = await adapter.requestDevice({ requiredFeatures: subgroups ? ['subgroups'] : [] });
// The families compared: without subgroups, and with them where the adapter has the feature.
const families = subgroups ? ['', 'sg:'] : [''];
if (!subgroups) console.log('the adapter has no subgroups: the subgroup reductions are not tested');
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
  const ySg = storage(new Float32Array(ybytes / 4));
  const wgGroups = [Math.min(blocks, 16384), Math.ceil(blocks / 16384), Math.ceil(L.nWg / 4)];
  // Split over the columns: kper random steps of 64 columns per split.
  const steps = Math.ceil(cols / 64);
  L.kper = linearCases.indexOf(L) === 3 ? 1 : int(1, Math.max(1, steps - 1));  // (case 3: ~20 splits)
  L.splits = Math.ceil(steps / L.kper);
  const part = storage(new Int32Array(L.splits * n * rows + 4));
  const ySplit = storage(new Float32Array(ybytes / 4));
  // linear_tile_wg's input: the codes packed four to a word by quant.wgsl (scale 1: the inputs are
  // integers already), rows of ceil(cols / 4) words.
  const words = Math.ceil(cols / 4);
  const xp = storage(new Uint32Array(n * words + 4));
  const tileParams = [...params];
  tileParams[5] = 0;
  tileParams[6] = words;
  run([['quant', [n, cols, xOff, xStride, { f: 1 }, 1], [xb, xp], [Math.ceil(words / 64), n, 1]],
       ['linear_tile_wg', [...tileParams, 1, 0, 0], [wb, sb, xp, yTile, part], [Math.ceil(rows / 64), Math.ceil(n / 64), 1]],
       // (one step: no split to make)
       ...(L.splits > 1 ? [['linear_tile_wg', [...tileParams, L.splits, L.kper, 0], [wb, sb, xp, ySplit, part], [Math.ceil(rows / 64), Math.ceil(n / 64), L.splits]],
                           ['linear_tile_wg', [...tileParams, L.splits, L.kper, 1], [wb, sb, xp, ySplit, part], [Math.ceil(rows / 256), n, 1]]] : []),
       ['linear_wg', paramsWg, [wb, sb, xb, yWg], wgGroups],
       ...(subgroups ? [['sg:linear_wg', paramsWg, [wb, sb, xb, ySg], wgGroups]] : [])]);
  L.tile = await read(yTile, ybytes);
  L.split = await read(ySplit, ybytes);
  L.wg = await read(yWg, ybytes);
  if (subgroups) L.sg = await read(ySg, ybytes);
}
const none = storage(new Float32Array(4));  // (a binding the dispatch does not read)
for (const M of mvCases) {
  const { rows, cols, rowWords, kind, n, lanes, xOff, xStride, yOff, yStride, inScale, outScale } = M;
  const ybytes = (yOff + n * yStride) * 4;
  const wb = storage(M.w), sb = storage(M.scale), xb = storage(M.x);
  const groups = [Math.min(M.grid, 16384), Math.ceil(M.grid / 16384), 1];
  const params = (e, yo, ys, sc = inScale, osc = outScale, ao = M.auxOff, as = M.auxStride) =>
    [rows, cols, rowWords, KIND[kind], n, xOff, xStride, yo, ys, 1, { f: sc }, { f: osc }, lanes, e, ao, as,
     { f: M.inScale2 }, { f: M.outScale2 }];
  const w2b = storage(M.w2), s2b = storage(M.scale2);
  M.out = {};
  for (const fam of families) {
    const y = storage(new Float32Array(ybytes / 4));
    run([[fam + 'linear_mv_wg', params(0, yOff, yStride), [wb, sb, xb, y, storage(new Float32Array(4)), wb, sb, none], groups]]);
    M.out[fam] = await read(y, ybytes);
  }
  // The epilogue: fused, and the plain output then gelu_mul (packed rows where it needs them).
  const auxBytes = M.aux.byteLength;
  const yPlain = storage(new Float32Array(n * rows)), yFused = storage(new Float32Array(n * rows));
  const auxFused = storage(M.aux), auxSep = storage(M.aux);
  run([['linear_mv_wg', params(0, 0, rows), [wb, sb, xb, yPlain, storage(new Float32Array(4)), wb, sb, none], groups],
       ['linear_mv_wg', params(M.epi, 0, rows), [wb, sb, xb, yFused, auxFused, wb, sb, none], groups],
       M.epi === 1 ? ['gelu_mul', [n, rows, 0, rows], [yPlain, auxSep], [Math.ceil(rows / 64), n, 1]]
                   : ['gelu_mul', [n, rows, M.auxOff, M.auxStride], [auxSep, yPlain], [Math.ceil(rows / 64), n, 1]]]);
  M.epiFused = M.epi === 1 ? await read(auxFused, auxBytes) : await read(yFused, n * rows * 4);
  M.epiSep = M.epi === 1 ? await read(auxSep, auxBytes) : await read(yPlain, n * rows * 4);
  // The pair in one dispatch (y at the case's offset and stride) against the gate's dispatch then
  // the up projection's with epilogue 1 (gelu(gate) x up into the gate's rows), in both families.
  M.pair = {};
  for (const fam of families) {
    const gate = storage(new Float32Array(n * rows)), yPair = storage(new Float32Array(ybytes / 4));
    run([[fam + 'linear_mv_wg', params(0, 0, rows), [wb, sb, xb, gate, storage(new Float32Array(4)), wb, sb, none], groups],
         [fam + 'linear_mv_wg', params(1, 0, rows, M.inScale2, M.outScale2, 0, rows), [w2b, s2b, xb, storage(new Float32Array(4)), gate, w2b, s2b, none], groups],
         [fam + 'linear_mv_wg', params(3, yOff, yStride), [wb, sb, xb, yPair, storage(new Float32Array(4)), w2b, s2b, none], groups]]);
    M.pair[fam] = { sep: await read(gate, n * rows * 4), fused: await read(yPair, ybytes) };
  }
  // Stacked (epilogue 4): the up projection's rows after the gate's in one dispatch, its outputs
  // after the gate's (aux_off), against the two linears' plain dispatches.
  M.stacked = {};
  for (const fam of families) {
    const second = yOff + n * yStride;
    const yStack = storage(new Float32Array(second + n * yStride)), ySecond = storage(new Float32Array(ybytes / 4));
    const blocks2 = Math.ceil(2 * rows / (256 / lanes)), grid2 = M.grid === Math.ceil(rows / (256 / lanes)) ? blocks2 : Math.min(M.grid, blocks2);
    run([[fam + 'linear_mv_wg', params(4, yOff, yStride, inScale, outScale, second, 0), [wb, sb, xb, yStack, storage(new Float32Array(4)), w2b, s2b, none],
          [Math.min(grid2, 16384), Math.ceil(grid2 / 16384), 1]],
         [fam + 'linear_mv_wg', params(0, yOff, yStride, M.inScale2, M.outScale2), [w2b, s2b, xb, ySecond, storage(new Float32Array(4)), w2b, s2b, none], groups]]);
    const st = await read(yStack, (second + n * yStride) * 4);
    M.stacked[fam] = { first: st.subarray(0, ybytes / 4), second: st.subarray(second - yOff), want2: await read(ySecond, ybytes) };
  }
}
// The residual norm in the prologue (pro 1: the input is the new residual; 2: its norm), with
// and without norm weights, under epilogues 0, 2 and the pair, against rmsnorm_wg (mode 1, or 2
// for its z) then linear_mv_wg without it, in each family: the outputs and the new residual the
// first workgroup writes, bit for bit.
const proCases = [];
mvCases.forEach((M, c) => {
  const { rows, cols, n, xStride } = M;
  const pro = 1 + (c % 2), epi = [0, 2, 3][c % 3];
  const hasWa = c % 4 !== 3 ? 1 : 0, hasWb = c % 5 !== 4 ? 1 : 0;
  const R = n * xStride, pad = int(0, 3);
  const rIn = pad, rOut = pad + R, tOff = pad + 2 * R, zOff = pad + 3 * R;
  // The residual ~ +-2 and t ~ +-3 (the input of pro 1 is the residual: codes up to ~200, clamped).
  const stream = new Float32Array(pad + 4 * R);
  for (let i = 0; i < R; ++i) {
    stream[rIn + i] = f32((rnd() * 2 - 1) * 2);
    stream[tOff + i] = f32((rnd() * 2 - 1) * 3);
  }
  const vpad = int(0, 5);
  const vecs = new Float32Array(vpad + 2 * cols).map(() => f32(rnd() * 2));
  const scale = c % 3 === 1 ? 1 : f32(0.5 + rnd());
  proCases.push({ M, pro, epi, hasWa, hasWb, rIn, rOut, tOff, zOff, stream, vecs, vpad, scale, eps: 1e-6,
                  what: `${M.what}: prologue norm ${pro}, weights ${hasWa}${hasWb}, epilogue ${epi}` });
});
for (const C of proCases) {
  const { M, pro, epi } = C;
  const { rows, cols, rowWords, kind, n, lanes, xStride, yOff, yStride, inScale, outScale } = M;
  const ybytes = (yOff + n * yStride) * 4;
  const groups = [Math.min(M.grid, 16384), Math.ceil(M.grid / 16384), 1];
  const wb = storage(M.w), sb = storage(M.scale), w2b = storage(M.w2), s2b = storage(M.scale2);
  const wa = C.vecs.subarray(C.vpad, C.vpad + cols), wbn = C.vecs.subarray(C.vpad + cols);
  const mvParams = (xo, xs, proWords) =>
    [rows, cols, rowWords, KIND[kind], n, xo, xs, yOff, yStride, 1, { f: inScale }, { f: outScale }, lanes, epi,
     M.auxOff, M.auxStride, { f: M.inScale2 }, { f: M.outScale2 }, ...proWords];
  const second = epi === 3 ? [w2b, s2b] : [wb, sb];
  C.out = {};
  for (const fam of families) {
    // rmsnorm_wg on t into a copy of the residual (mode 2: its norm into z), then the plain kernel.
    const xNorm = storage(C.stream), yNorm = storage(C.stream), z = storage(new Float32Array(n * cols));
    const yA = storage(new Float32Array(ybytes / 4)), yB = storage(new Float32Array(ybytes / 4));
    const streamB = storage(C.stream);
    const aux = () => (epi === 2 ? storage(M.aux) : storage(new Float32Array(4)));
    run([[fam + 'rmsnorm_wg', [n, cols, C.tOff, xStride, C.rIn, xStride, C.hasWa, pro, { f: C.eps }, { f: C.scale }, C.hasWb, 0],
          [xNorm, storage(wa), yNorm, storage(wbn), z], [n, 1, 1]],
         [fam + 'linear_mv_wg', pro === 1 ? mvParams(C.rIn, xStride, []) : mvParams(0, cols, []),
          [wb, sb, pro === 1 ? yNorm : z, yA, aux(), ...second, none], groups],
         [fam + 'linear_mv_wg',
          mvParams(0, xStride, [pro, C.rIn, C.rOut, C.tOff, C.vpad, C.vpad + cols, C.hasWa | (C.hasWb << 1) | 4 | 8,
                                { f: C.scale }, { f: C.eps }, 0, { f: 0 }, 0, 0, C.zOff]),
          [wb, sb, streamB, yB, aux(), ...second, storage(C.vecs)], groups]]);
    const nb = C.stream.byteLength;
    C.out[fam] = { a: await read(yA, ybytes), b: await read(yB, ybytes), rNorm: await read(yNorm, nb), rPro: await read(streamB, nb),
                   z: await read(z, n * cols * 4) };
  }
}
// The pair's hand-off (pack): its outputs as the next linear's packed input codes, that linear
// taking them as they are (x_packed), against the same linear quantizing the pair's outputs
// itself, bit for bit; every consumer kind whose column group divides the pair's rows per
// workgroup.
const packCases = [];
mvCases.forEach((M, c) => {
  const rpw = 256 / M.lanes;
  for (const kind of ['q2', 'q4', 'q8']) {
    const G = { q2: 16, q4: 8, q8: 4 }[kind], group = { q2: 4, q4: 2, q8: 1 }[kind];
    const rows = int(1, 40), cols = M.rows;
    const rowWords = Math.ceil(cols / (32 / BITS[kind]));
    if (rpw % G !== 0 || M.n * rowWords * group > 3072) continue;
    const { w } = srqWeights(kind, rows, cols);
    const scale = new Float32Array(rows).map(() => f32(0.5 + rnd()) / 64);
    packCases.push({ M, kind, rows, cols, rowWords, xw: rowWords * group, w, scale, lanes: pick([8, 16, 32, 64]),
                     inScale: f32(0.001 + rnd() * 0.01), outScale: c % 2 ? f32(0.001 + rnd() * 0.01) : 0,
                     what: `${M.what}: its pair handing off to a ${kind} ${rows}x${cols} linear` });
  }
});
for (const C of packCases) {
  const { M } = C;
  const groups = [Math.min(M.grid, 16384), Math.ceil(M.grid / 16384), 1];
  const ybytes = (M.yOff + M.n * M.yStride) * 4;
  const pairParams = [M.rows, M.cols, M.rowWords, KIND[M.kind], M.n, M.xOff, M.xStride, M.yOff, M.yStride, 1,
                      { f: M.inScale }, { f: M.outScale }, M.lanes, 3, 0, 0, { f: M.inScale2 }, { f: M.outScale2 },
                      0, 0, 0, 0, 0, 0, 0, { f: 0 }, { f: 0 }, KIND[C.kind], { f: C.inScale }, C.xw, 0];
  const cBlocks = Math.ceil(C.rows / (256 / C.lanes));
  const consumer = (xo, xs, packed) =>
    [C.rows, C.cols, C.rowWords, KIND[C.kind], M.n, xo, xs, 0, C.rows, 1, { f: C.inScale }, { f: C.outScale }, C.lanes, 0,
     0, 0, { f: 0 }, { f: 0 }, 0, 0, 0, 0, 0, 0, 0, { f: 0 }, { f: 0 }, 0, { f: 0 }, 0, packed];
  C.out = {};
  for (const fam of families) {
    const y = storage(new Float32Array(ybytes / 4)), packedBuf = storage(new Uint32Array(M.n * C.xw + 4));
    const cw = storage(C.w), cs = storage(C.scale);
    const zA = storage(new Float32Array(M.n * C.rows)), zB = storage(new Float32Array(M.n * C.rows));
    run([[fam + 'linear_mv_wg', pairParams, [storage(M.w), storage(M.scale), storage(M.x), y, packedBuf, storage(M.w2), storage(M.scale2), none], groups],
         [fam + 'linear_mv_wg', consumer(M.yOff, M.yStride, 0), [cw, cs, y, zA, storage(new Float32Array(4)), cw, cs, none], [cBlocks, 1, 1]],
         [fam + 'linear_mv_wg', consumer(0, C.xw, 1), [cw, cs, packedBuf, zB, storage(new Float32Array(4)), cw, cs, none], [cBlocks, 1, 1]]]);
    C.out[fam] = { a: await read(zA, M.n * C.rows * 4), b: await read(zB, M.n * C.rows * 4) };
  }
}
for (const A of argmaxCases) {
  const zb = storage(A.z), pv = storage(new Float32Array(A.rows * A.parts)), pi = storage(new Uint32Array(A.rows * A.parts));
  const whole = storage(new Uint32Array(A.rows)), cut = storage(new Uint32Array(A.rows));
  run([['argmax_wg', [A.rows, A.vocab, 1, 2], [zb, whole, pv, pi], [A.rows, 1, 1]],
       ['argmax_wg', [A.rows, A.vocab, A.parts, 0], [zb, cut, pv, pi], [A.parts, A.rows, 1]],
       ['argmax_wg', [A.rows, A.vocab, A.parts, 1], [zb, cut, pv, pi], [A.rows, 1, 1]]]);
  A.whole = new Uint32Array((await read(whole, A.rows * 4)).buffer);
  A.cut = new Uint32Array((await read(cut, A.rows * 4)).buffer);
}
const reduceOut = {};
{
  const vb = storage(new Float32Array(reduceCases.flatMap((r) => [...r.v])));
  for (const fam of families) {
    const o = storage(new Float32Array(3 * reduceCases.length));
    run([[fam + 'reduce', [0], [vb, o], [reduceCases.length, 1, 1]]]);
    reduceOut[fam] = await read(o, 12 * reduceCases.length);
  }
}
for (const D of denseCases) {
  const { rows, cols, rowWords, kind, n, xOff, xStride, yOff, yStride } = D;
  const ybytes = (yOff + n * yStride) * 4;
  const wb = storage(D.w), sb = storage(D.scale), xb = storage(D.x);
  const params = [rows, cols, rowWords, DENSE[kind], n, xOff, xStride, yOff, yStride, 0, { f: 0 }, { f: 0 }];
  const blocks = Math.ceil(rows / 4);
  D.out = {};
  for (const fam of families) {
    const y = storage(new Float32Array(ybytes / 4));
    run([[fam + 'linear_wg', params, [wb, sb, xb, y], [Math.min(blocks, 16384), Math.ceil(blocks / 16384), Math.ceil(n / 4)]]]);
    D.out[fam] = await read(y, ybytes);
  }
}
for (const D of denseTileCases) {
  const { rows, cols, rowWords, kind, n, xOff, xStride, yOff, yStride } = D;
  const ybytes = (yOff + n * yStride) * 4;
  const y = storage(new Float32Array(ybytes / 4));
  const params = [rows, cols, rowWords, DENSE[kind], n, xOff, xStride, yOff, yStride, 0, { f: 0 }, { f: 0 }];
  run([['linear_dense_tile_wg', params, [storage(D.w), storage(D.scale), storage(D.x), y], [Math.ceil(rows / 64), Math.ceil(n / 64), 1]]]);
  D.out = await read(y, ybytes);
}
for (const C of pleCases) {
  const pl = storage(new Float32Array(C.n * C.cols));
  run([['ple_combine', [C.n, C.layers, C.width, { f: 1 }, { f: C.inputScale }, { f: 1e-6 }, DENSE[C.kind], C.stride,
                        C.rowWords, C.blocks ? C.cols / C.blocks : 0, { f: C.embedScale }],
        [storage(C.tok), storage(new Float32Array(C.width).fill(1)), pl], [Math.ceil(C.layers / 64), C.n, 1]]]);
  C.out = await read(pl, C.n * C.cols * 4);
}
for (const N of normCases) {
  const { rows, width, mode, xOff, xStride, yOff, yStride } = N;
  const xb = storage(N.x), wb = storage(N.w), w2b = storage(N.w2);
  N.out = {};
  for (const fam of families) {
    const y = storage(N.y0), z = storage(new Float32Array(rows * width));
    run([[fam + 'rmsnorm_wg', [rows, width, xOff, xStride, yOff, yStride, 1, mode, { f: N.eps }, { f: N.scale }, 1],
          [xb, wb, y, w2b, z], [rows, 1, 1]]]);
    N.out[fam] = { y: await read(y, N.y0.byteLength), z: await read(z, rows * width * 4) };
  }
}
for (const H of headCases) {
  const { hd, heads, n, rope, toCache, hasW, ring, pos0, csOff } = H;
  const sb = storage(H.src), wb = storage(H.w), cb = storage(H.cs);
  H.out = {};
  for (const fam of families) {
    const d = storage(new Float32Array(H.dstLen).fill(NaN));
    const dummy = () => storage(new Float32Array(4));
    run([[fam + 'head_norm_wg', [n, heads, hd, hasW, rope, toCache, pos0, ring, 0, csOff, { f: 1e-6 }, 0, 0, 0, 0],
          [sb, wb, cb, d, dummy(), dummy(), dummy()], [heads, n, 1]]]);
    H.out[fam] = await read(d, H.dstLen * 4);
  }
}
// A layer's three head norms in one dispatch (kv_heads > 0) against three single dispatches (the
// query heads, then the key and value heads into their cache rings): bit for bit.
const qkvResults = [];
for (let c = 0; c < 4; ++c) {
  const hd = pick([8, 64, 256, 512]), kvHeads = int(1, 2), heads = kvHeads * pick([1, 2, 4]), n = int(1, 3);
  const ring = n + int(0, 5), pos0 = int(0, 20), hasW2 = c % 2;
  const qw = heads * hd, kw = kvHeads * hd;
  const rand = (len) => new Float32Array(len).map(() => f32((rnd() * 2 - 1) * 2));
  const q = rand(n * qw), k = rand(n * kw), v = rand(n * kw);
  const kOff = n * qw + int(0, 3), vOff = kOff + n * kw + int(0, 3);
  const all = new Float32Array(vOff + n * kw);
  all.set(q, 0); all.set(k, kOff); all.set(v, vOff);
  const wq = rand(hd), wk = rand(hd);
  const cs = rand(n * hd);
  const dummy = () => storage(new Float32Array(4));
  const fresh = (len) => storage(new Float32Array(len).fill(NaN));
  const one = (src, heads_, w, hasW_, rope, toCache, dst) =>
    ['head_norm_wg', [n, heads_, hd, hasW_, rope, toCache, pos0, ring, 0, 0, { f: 1e-6 }, 0, 0, 0, 0],
     [storage(src), storage(w), storage(cs), dst, dummy(), dummy(), dummy()], [heads_, n, 1]];
  const sq = fresh(n * qw), sk = fresh(ring * kw), sv = fresh(ring * kw);
  const cq = fresh(n * qw), ck = fresh(ring * kw), cv = fresh(ring * kw);
  run([one(q, heads, wq, 1, 1, 0, sq), one(k, kvHeads, wk, hasW2, 1, 1, sk), one(v, kvHeads, wk, 0, 0, 1, sv),
       ['head_norm_wg', [n, heads, hd, 1, 1, 0, pos0, ring, 0, 0, { f: 1e-6 }, kvHeads, kOff, vOff, hasW2],
        [storage(all), storage(wq), storage(cs), cq, storage(wk), ck, cv], [heads + 2 * kvHeads, n, 1]]]);
  const pairs = [[sq, cq, n * qw], [sk, ck, ring * kw], [sv, cv, ring * kw]];
  let bad = 0;
  for (const [a, b, len] of pairs) {
    const [x, y] = [await read(a, len * 4), await read(b, len * 4)];
    x.forEach((val, i) => { if (!Object.is(val, y[i])) ++bad; });
  }
  qkvResults.push({ what: `head_norm_wg q/k/v in one dispatch, hd ${hd}, ${heads}/${kvHeads} heads, ${n} tokens, k weights ${hasW2}`, bad });
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
  A.out = {};
  for (const fam of families) {
    run([[fam + 'attention_wg', [...base, splits, chunk, 1], [qb, kb, vb, mx, part, none, none], [splits, heads, n]],
         ['attention_merge_wg', [n, heads, hd, splits], [part, oSplit, mx], [heads, n, Math.ceil(hd / 64)]],  // no reductions
         [fam + 'attention_wg', [...base, 1, 0, 2], [qb, kb, vb, oWg, sink, none, none], [heads, n, 1]]]);
    A.out[fam] = { split: await read(oSplit, rowsN * hd * 4), wg: await read(oWg, rowsN * hd * 4) };
    if (!fam && hd % 8 === 0) {
      const oP = storage(new Float32Array(rowsN * hd));
      run([['attention_prompt_wg', base, [qb, kb, vb, oP], [kvWidth / hd * Math.ceil(group / 8), n, 1]]]);
      A.prompt = await read(oP, rowsN * hd * 4);
    }
    // q_norm (both phases) against head_norm_wg's query heads then the attention, bit for bit.
    const rawb = storage(A.qRaw), qwb = storage(A.qw), csb = storage(A.cs), qn = storage(new Float32Array(rowsN * hd));
    const oA = storage(new Float32Array(rowsN * hd)), oB = storage(new Float32Array(rowsN * hd));
    const pA = storage(new Float32Array(rowsN * hd)), pB = storage(new Float32Array(rowsN * hd));
    const qnParams = [1, A.hasW, 0, { f: 1e-6 }];
    run([[fam + 'head_norm_wg', [n, heads, hd, A.hasW, 1, 0, pos0, ring, 0, 0, { f: 1e-6 }, 0, 0, 0, 0],
          [rawb, qwb, csb, qn, none, storage(new Float32Array(4)), storage(new Float32Array(4))], [heads, n, 1]],
         [fam + 'attention_wg', [...base, splits, chunk, 1], [qn, kb, vb, mx, part, none, none], [splits, heads, n]],
         ['attention_merge_wg', [n, heads, hd, splits], [part, oA, mx], [heads, n, Math.ceil(hd / 64)]],
         [fam + 'attention_wg', [...base, splits, chunk, 1, ...qnParams], [rawb, kb, vb, mx, part, qwb, csb], [splits, heads, n]],
         ['attention_merge_wg', [n, heads, hd, splits], [part, oB, mx], [heads, n, Math.ceil(hd / 64)]],
         [fam + 'attention_wg', [...base, 1, 0, 2], [qn, kb, vb, pA, sink, none, none], [heads, n, 1]],
         [fam + 'attention_wg', [...base, 1, 0, 2, ...qnParams], [rawb, kb, vb, pB, sink, qwb, csb], [heads, n, 1]]]);
    A.out[fam].qn = [await read(oA, rowsN * hd * 4), await read(oB, rowsN * hd * 4), await read(pA, rowsN * hd * 4), await read(pB, rowsN * hd * 4)];
  }
}
device.destroy();

// The comparisons.
const relL2 = (a, b) => {
  let num = 0, den = 0;
  for (let i = 0; i < a.length; ++i) {
    num += (a[i] - b[i]) ** 2;
    den += b[i] * b[i];
  }
  return Math.sqrt(num / Math.max(den, 1e-30));
};
for (const L of linearCases) {
  let bad = 0, badRef = 0, badSg = 0, badSplit = 0, example = '';
  for (let t = 0; t < L.n; ++t) {
    for (let r = 0; r < L.rows; ++r) {
      const i = L.yOff + t * L.yStride + r;
      if (t < L.nWg && !Object.is(L.tile[i], L.wg[i])) ++bad;
      if (L.splits > 1 && !Object.is(L.split[i], L.tile[i])) ++badSplit;
      if (t < L.nWg && L.sg && !Object.is(L.sg[i], L.want[t * L.rows + r])) ++badSg;
      if (!Object.is(L.tile[i], L.want[t * L.rows + r])) {
        if (!badRef++) example = ` (token ${t} row ${r}: ${L.tile[i]}, want ${L.want[t * L.rows + r]})`;
      }
    }
  }
  check(bad === 0, `${L.what}: ${bad} outputs of linear_wg differ from linear_tile_wg's`);
  check(badRef === 0, `${L.what}: ${badRef} outputs of linear_tile_wg differ from the integer reference${example}`);
  check(badSg === 0, `${L.what}: ${badSg} outputs of linear_wg with subgroups differ from the integer reference`);
  check(badSplit === 0, `${L.what}: ${badSplit} outputs of linear_tile_wg in ${L.splits} splits of ${L.kper} steps differ from one pass`);
}
for (const M of mvCases) {
  for (const fam of families) {
    let bad = 0, example = '';
    for (let t = 0; t < M.n; ++t) {
      for (let r = 0; r < M.rows; ++r) {
        const got = M.out[fam][M.yOff + t * M.yStride + r], want = M.want[t * M.rows + r];
        if (!Object.is(got, want) && !bad++) example = ` (token ${t} row ${r}: ${got}, want ${want})`;
      }
    }
    check(bad === 0, `${M.what}${fam ? ' (subgroup prelude)' : ''}: ${bad} outputs differ from the integer reference${example}`);
  }
  let bad = 0;
  M.epiSep.forEach((v, i) => { if (!Object.is(v, M.epiFused[i])) ++bad; });
  check(bad === 0, `${M.what}, epilogue ${M.epi}: ${bad} outputs differ from linear_mv_wg then gelu_mul`);
  for (const fam of families) {
    let badPair = 0, example = '';
    for (let t = 0; t < M.n; ++t) {
      for (let r = 0; r < M.rows; ++r) {
        const got = M.pair[fam].fused[M.yOff + t * M.yStride + r], want = M.pair[fam].sep[t * M.rows + r];
        if (!Object.is(got, want) && !badPair++) example = ` (token ${t} row ${r}: ${got}, want ${want})`;
      }
    }
    const S = M.stacked[fam];
    let badStack = 0;
    for (let t = 0; t < M.n; ++t) {
      for (let r = 0; r < M.rows; ++r) {
        const i = M.yOff + t * M.yStride + r;
        if (!Object.is(S.first[i], M.out[fam][i])) ++badStack;
        if (!Object.is(S.second[i], S.want2[i])) ++badStack;
      }
    }
    check(badStack === 0, `${M.what}${fam ? ' (subgroup prelude)' : ''}, two linears stacked (${M.inScale2 === M.inScale ? 'one input scale' : 'two input scales'}): ${badStack} outputs differ from two dispatches`);
    check(badPair === 0, `${M.what}${fam ? ' (subgroup prelude)' : ''}, gate and up paired (${M.inScale2 === M.inScale ? 'one input scale' : 'two input scales'}): ${badPair} outputs differ from the two dispatches${example}`);
  }
}
for (const C of proCases) {
  for (const fam of families) {
    const o = C.out[fam];
    let bad = 0, badR = 0, badZ = 0, example = '';
    for (let t = 0; t < C.M.n; ++t) {
      for (let r = 0; r < C.M.rows; ++r) {
        const i = C.M.yOff + t * C.M.yStride + r;
        if (!Object.is(o.a[i], o.b[i]) && !bad++) example = ` (token ${t} row ${r}: ${o.b[i]}, want ${o.a[i]})`;
      }
      for (let k = 0; k < C.M.cols; ++k) {
        const i = t * C.M.xStride + k;
        if (!Object.is(o.rPro[C.rOut + i], o.rNorm[C.rIn + i])) ++badR;
        if (!Object.is(o.rPro[C.zOff + i], C.pro === 2 ? o.z[t * C.M.cols + k] : o.rNorm[C.rIn + i])) ++badZ;
      }
    }
    check(bad === 0, `${C.what}${fam ? ' (subgroup prelude)' : ''}: ${bad} outputs differ from rmsnorm_wg then linear_mv_wg${example}`);
    check(badR === 0, `${C.what}${fam ? ' (subgroup prelude)' : ''}: ${badR} elements of the new residual differ from rmsnorm_wg's`);
    check(badZ === 0, `${C.what}${fam ? ' (subgroup prelude)' : ''}: ${badZ} elements of the stored input differ from rmsnorm_wg's`);
  }
}
for (const C of packCases) {
  for (const fam of families) {
    let bad = 0, example = '';
    C.out[fam].a.forEach((v, i) => { if (!Object.is(v, C.out[fam].b[i]) && !bad++) example = ` (output ${i}: ${C.out[fam].b[i]}, want ${v})`; });
    check(bad === 0, `${C.what}${fam ? ' (subgroup prelude)' : ''}: ${bad} outputs from the handed-off codes differ from quantizing the pair's outputs${example}`);
  }
}
for (const C of pleCases) {
  const bad = C.want.filter((v, i) => !Object.is(v, C.out[i])).length;
  check(bad === 0, `${C.what}: ${bad} of ${C.want.length} values differ from EmbeddingRow's (e.g. ${C.out[C.want.findIndex((v, i) => !Object.is(v, C.out[i]))]})`);
}
console.log(`ple_combine: the stored per-layer embedding rows of every kind (${pleCases.length} cases) decoded bit for bit as EmbeddingRow decodes them`);
for (const A of argmaxCases) {
  check(A.want.every((w, r) => A.whole[r] === w && A.cut[r] === w),
        `${A.what}: ids ${[...A.whole]} (whole), ${[...A.cut]} (cut), want ${A.want}`);
}
console.log(`argmax_wg: ${argmaxCases.length} random rows (ties, NaN, a row of NaN, of -inf), whole and cut into slices, against a scan`);
console.log(`linear_mv_wg's hand-off: ${packCases.length} random pairs handing their outputs to a linear of each kind as its packed input codes, bit for bit that linear quantizing them`);
console.log(`linear_mv_wg with the residual norm in its prologue: ${proCases.length} random cases (${proCases.filter((C) => C.pro === 2).length} with the second norm) against rmsnorm_wg then linear_mv_wg, outputs, new residual and stored input bit for bit`);
console.log(`linear_mv_wg: ${mvCases.length} random SRQ linears of 1-4 tokens (f32 inputs quantized in the kernel; ${mvCases.filter((M) => M.rowWords % 4 === 0).length} with rows of whole 16-byte vectors; ${mvCases.filter((M) => M.grid < Math.ceil(M.rows / (256 / M.lanes))).length} on fewer workgroups than row blocks) against the integer reference, its gelu epilogues against gelu_mul.wgsl, and gate and up in one dispatch and two linears stacked in one (${mvCases.filter((M) => M.inScale2 !== M.inScale).length} with two input scales) against two, bit for bit`);
{
  let worst = 0;
  for (const fam of families) {
    reduceCases.forEach((R, c) => {
      const [hi, lo, m] = reduceOut[fam].subarray(3 * c, 3 * c + 3);
      if (R.special !== undefined) {
        check(Number.isNaN(hi) && (Number.isNaN(R.special) || m === R.special),
              `ff_workgroup_sum / workgroup_max${fam ? ' with subgroups' : ''} with ${R.special}: ${hi}, ${m}`);
        return;
      }
      const err = Math.abs(Number(toBig(hi) + toBig(lo) - R.exact) / 2 ** 200) / (2 ** -40 * R.mag);
      check(err <= 1, `ff_workgroup_sum${fam ? ' with subgroups' : ''}, case ${c}: ${err.toFixed(3)} of 2^-40 sum|v| from the exact sum`);
      check(m === R.max, `workgroup_max${fam ? ' with subgroups' : ''}, case ${c}: ${m}, want ${R.max}`);
      worst = Math.max(worst, err);
    });
  }
  console.log(`ff_workgroup_sum, workgroup_max${subgroups ? ', with and without subgroups' : ''}: ${reduceCases.length - 2} random cases, worst ${worst.toFixed(4)} of 2^-40 sum|v| from the exact sum, maxima exact; an infinity and a NaN give NaN`);
}
console.log(`linear_tile_wg: ${linearCases.length} random SRQ linears against linear_wg${subgroups ? ' (with and without subgroups)' : ''} and the integer reference, and split over the columns (${linearCases.filter((L) => L.splits > 1).length} in 2-${Math.max(...linearCases.map((L) => L.splits))} splits) against one pass, bit for bit`);

// Float-float sums: within 2^-22 of the sum of the products' magnitudes (the f32 result's own
// rounding is half of 2^-23 of the result), and the two families as close to each other.
let worstDense = 0, worstDensePair = 0;
for (const D of denseCases) {
  for (const fam of families) {
    let worst = 0, pair = 0;
    for (let t = 0; t < D.n; ++t) {
      for (let r = 0; r < D.rows; ++r) {
        const i = D.yOff + t * D.yStride + r, k = t * D.rows + r, bound = 2 ** -22 * D.mag[k] + 1e-30;
        worst = Math.max(worst, Math.abs(D.out[fam][i] - D.want[k]) / bound);
        if (fam) pair = Math.max(pair, Math.abs(D.out[fam][i] - D.out[''][i]) / bound);
      }
    }
    check(worst <= 1, `${D.what}${fam ? ' with subgroups' : ''}: ${worst.toFixed(3)} of the bound from float64`);
    check(pair <= 1, `${D.what}: with and without subgroups ${pair.toFixed(3)} of the bound apart`);
    worstDense = Math.max(worstDense, worst);
    worstDensePair = Math.max(worstDensePair, pair);
  }
}
console.log(`linear_wg without SRQ inputs: ${denseCases.length} random cases, worst ${worstDense.toFixed(3)} of 2^-22 sum|products| from float64, ${worstDensePair.toFixed(3)} between the families`);
// The tile's blocks of 8 products are added pairwise in f32 before their float-float sum: up to
// three more roundings of the block's partial sums (and an FMA's unrounded product), so twice
// the bound.
let worstTile = 0;
for (const D of denseTileCases) {
  let worst = 0, example = '';
  for (let t = 0; t < D.n; ++t) {
    for (let r = 0; r < D.rows; ++r) {
      const i = D.yOff + t * D.yStride + r, k = t * D.rows + r, bound = 2 ** -21 * D.mag[k] + 1e-30;
      const e = Math.abs(D.out[i] - D.want[k]) / bound;
      if (!(e <= worst)) {
        worst = e;
        example = ` (token ${t} row ${r}: ${D.out[i]}, want ${D.want[k]})`;
      }
    }
  }
  check(worst <= 1, `${D.what}: ${worst.toFixed(3)} of the bound from float64${example}`);
  worstTile = Math.max(worstTile, worst);
}
console.log(`linear_dense_tile_wg: ${denseTileCases.length} random cases, worst ${worstTile.toFixed(3)} of 2^-21 sum|products| from float64`);

// Norms: per row within 1e-6 (rel L2) of float64 (inverseSqrt is within 2 ulp), the families within
// 1e-6 of each other.
let worstNorm = 0, worstNormPair = 0;
for (const N of normCases) {
  for (const fam of families) {
    for (let r = 0; r < N.rows; ++r) {
      const got = N.out[fam].y.subarray(N.yOff + r * N.yStride, N.yOff + r * N.yStride + N.width);
      const gotZ = N.out[fam].z.subarray(r * N.width, (r + 1) * N.width);
      const e = relL2(got, N.wantY.subarray(r * N.width, (r + 1) * N.width));
      const ez = N.mode === 2 ? relL2(gotZ, N.wantZ.subarray(r * N.width, (r + 1) * N.width)) : 0;
      check(e <= 1e-6 && ez <= 1e-6, `${N.what}${fam ? ' with subgroups' : ''} row ${r}: rel L2 ${e}, next norm ${ez}`);
      worstNorm = Math.max(worstNorm, e, ez);
      if (fam) {
        const p = Math.max(relL2(got, N.out[''].y.subarray(N.yOff + r * N.yStride, N.yOff + r * N.yStride + N.width)),
                           N.mode === 2 ? relL2(gotZ, N.out[''].z.subarray(r * N.width, (r + 1) * N.width)) : 0);
        check(p <= 1e-6, `${N.what} row ${r}: with and without subgroups ${p} apart`);
        worstNormPair = Math.max(worstNormPair, p);
      }
    }
  }
}
for (const H of headCases) {
  const idx = [...H.want.keys()].filter((i) => !Number.isNaN(H.want[i]));
  for (const fam of families) {
    const got = idx.map((i) => H.out[fam][i]), want = idx.map((i) => H.want[i]);
    const untouched = [...H.out[fam]].every((v, i) => !Number.isNaN(H.want[i]) || Number.isNaN(v));
    const e = relL2(got, want);
    check(e <= 1e-6 && untouched, `${H.what}${fam ? ' with subgroups' : ''}: rel L2 ${e}${untouched ? '' : ', wrote outside its rows'}`);
    worstNorm = Math.max(worstNorm, e);
    if (fam) {
      const p = relL2(got, idx.map((i) => H.out[''][i]));
      check(p <= 1e-6, `${H.what}: with and without subgroups ${p} apart`);
      worstNormPair = Math.max(worstNormPair, p);
    }
  }
}
for (const Q of qkvResults) check(Q.bad === 0, `${Q.what}: ${Q.bad} values differ from three dispatches`);
console.log(`head_norm_wg: ${qkvResults.length} random layers' q/k/v head norms in one dispatch, bit for bit three dispatches'`);
console.log(`rmsnorm_wg, head_norm_wg: ${normCases.length + headCases.length} random cases, worst rel L2 ${worstNorm.toExponential(2)} from float64, ${worstNormPair.toExponential(2)} between the families`);

let worstSplit = 0, worstPair = 0;
for (const A of attnCases) {
  for (const fam of families) {
    const { split, wg } = A.out[fam];
    let errSplit = 0, errPair = 0;
    for (let r = 0; r < A.n * A.heads; ++r) {
      let num = 0, numWg = 0, den = 0, pair = 0, fams = 0;
      for (let i = 0; i < A.hd; ++i) {
        const o = A.want[r * A.hd + i];
        num += (split[r * A.hd + i] - o) ** 2;
        numWg += (wg[r * A.hd + i] - o) ** 2;
        pair += (split[r * A.hd + i] - wg[r * A.hd + i]) ** 2;
        if (fam) fams += (wg[r * A.hd + i] - A.out[''].wg[r * A.hd + i]) ** 2 + (split[r * A.hd + i] - A.out[''].split[r * A.hd + i]) ** 2;
        den += o * o;
      }
      den = Math.max(den, 1e-30);
      errSplit = Math.max(errSplit, Math.sqrt(num / den), Math.sqrt(numWg / den));
      errPair = Math.max(errPair, Math.sqrt(pair / den), Math.sqrt(fams / den));
    }
    const how = fam ? ' with subgroups' : '';
    check(errSplit <= 1e-5, `${A.what}${how}: ${errSplit} from the float64 reference (rel L2)`);
    check(errPair <= 1e-6, `${A.what}${how}: split and one pass (and the families) differ by ${errPair} (rel L2)`);
    const [oA, oB, pA, pB] = A.out[fam].qn;
    const badQ = oA.filter((v, i) => !Object.is(v, oB[i])).length + pA.filter((v, i) => !Object.is(v, pB[i])).length;
    check(badQ === 0, `${A.what}${how}: ${badQ} outputs with the query head norm inside (q_norm) differ from head_norm_wg then the attention`);
    worstSplit = Math.max(worstSplit, errSplit);
    worstPair = Math.max(worstPair, errPair);
  }
}
// attention_prompt_wg: the same bounds against float64 and attention_wg's one pass (its value
// sums add 8 keys' products in f32 before the float-float sum).
let worstPrompt = 0, worstPromptPair = 0, promptCases = 0;
for (const A of attnCases) {
  if (!A.prompt) continue;
  ++promptCases;
  let err = 0, pairErr = 0;
  for (let r = 0; r < A.n * A.heads; ++r) {
    let num = 0, den = 0, pair = 0;
    for (let i = 0; i < A.hd; ++i) {
      const o = A.want[r * A.hd + i], g = A.prompt[r * A.hd + i];
      num += (g - o) ** 2;
      pair += (g - A.out[''].wg[r * A.hd + i]) ** 2;
      den += o * o;
    }
    den = Math.max(den, 1e-30);
    err = Math.max(err, Math.sqrt(num / den));
    pairErr = Math.max(pairErr, Math.sqrt(pair / den));
  }
  check(err <= 1e-5, `${A.what}: attention_prompt_wg ${err} from the float64 reference (rel L2)`);
  check(pairErr <= 1e-6, `${A.what}: attention_prompt_wg and attention_wg's one pass differ by ${pairErr} (rel L2)`);
  worstPrompt = Math.max(worstPrompt, err);
  worstPromptPair = Math.max(worstPromptPair, pairErr);
}
check(promptCases >= 8, `attention_prompt_wg ran on ${promptCases} cases`);
console.log(`attention_prompt_wg: ${promptCases} random cases, worst rel L2 ${worstPrompt.toExponential(2)} from float64, ${worstPromptPair.toExponential(2)} from attention_wg's one pass`);
console.log(`attention_wg split over the keys and in one pass${subgroups ? ', with and without subgroups' : ''}: ${attnCases.length} random cases, worst rel L2 ${worstSplit.toExponential(2)} from float64, ${worstPair.toExponential(2)} between them; with the query head norm inside, bit for bit head_norm_wg then the attention`);

finish('web_wgsl_kernels_test');
process.exit(0);  // Dawn for Node can crash in its teardown at a natural exit
