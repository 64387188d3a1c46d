// Shared by every kernel of the WebGPU backend (prepended to each module by webgpu_backend.cc,
// after the family's reductions: prelude_workgroup.wgsl or prelude_subgroups.wgsl).
// Weights are stored as the checkpoint holds them, in u32 words: f32; bf16 and f16 two per word
// (the low half first); int8 / int4 / int2 codes four / eight / sixteen per word, LSB first, in
// offset binary for 4 and 2 bits (value = code - 8, code - 2), two's complement for 8 bits.

const KIND_F32: u32 = 0u;
const KIND_BF16: u32 = 1u;
const KIND_F16: u32 = 2u;
const KIND_Q2: u32 = 3u;
const KIND_Q4: u32 = 4u;
const KIND_Q8: u32 = 5u;

// Elements per stored word of a kind.
fn kind_per_word(kind: u32) -> u32 {
  switch kind {
    case KIND_F32: { return 1u; }
    case KIND_BF16, KIND_F16: { return 2u; }
    case KIND_Q8: { return 4u; }
    case KIND_Q4: { return 8u; }
    default: { return 16u; }
  }
}

// Element k of a stored word of a dense kind: its value.
fn word_value(kind: u32, word: u32, k: u32) -> f32 {
  if (kind == KIND_F32) {
    return bitcast<f32>(word);
  }
  if (kind == KIND_BF16) {
    return bitcast<f32>(select(word & 0xffff0000u, word << 16u, k == 0u));
  }
  return unpack2x16float(word)[k];
}

// Element k of a stored word of a quantized kind: its integer code.
fn word_code(kind: u32, word: u32, k: u32) -> i32 {
  if (kind == KIND_Q8) {
    return bitcast<i32>(word << (24u - 8u * k)) >> 24u;
  }
  if (kind == KIND_Q4) {
    return i32((word >> (4u * k)) & 15u) - 8;
  }
  return i32((word >> (2u * k)) & 3u) - 2;
}

// transformers' apply_srq code: clamp(round_half_even(z / s), -128, 127) of the exact quotient.
// WGSL's division is within 2.5 ulp, so a quotient that lands near a rounding boundary
// (k + 0.5) is decided exactly: the sign of 2z - (2k + 1) s, with s split into two 12-bit halves
// so that both products are exact and the first difference is exact (Sterbenz).
fn srq_code(z: f32, s: f32) -> f32 {
  let q = z / s;
  var r = round(q);
  let f = floor(q);
  if (abs(q) < 300.0 && abs(q - f - 0.5) <= 1e-5 * max(1.0, abs(q))) {
    let odd = 2.0 * f + 1.0;
    let s_hi = bitcast<f32>(bitcast<u32>(s) & 0xfffff000u);
    let s_lo = s - s_hi;
    let d = (2.0 * z - odd * s_hi) - odd * s_lo;
    if (d > 0.0) {
      r = f + 1.0;
    } else if (d < 0.0) {
      r = f;
    } else {
      r = select(f + 1.0, f, (i32(f) & 1) == 0);
    }
  }
  return clamp(r, -128.0, 127.0);
}

// An SRQ linear's output rounding (transformers' srq(y, s_out)): y rounded to its code times the
// scale, y itself when the linear has no output scale.
fn srq_out(y: f32, s: f32) -> f32 {
  if (s > 0.0) {
    return srq_code(y, s) * s;
  }
  return y;
}

// tanh within a few ulp (the reference rounds the exact value; the built-in's accuracy is not
// specified tightly enough): below 0.5 its Taylor series to x^15 (the next term is < 1e-8 of x),
// where 1 - 2 / (exp(2x) + 1) would lose up to 7 bits to cancellation; above, that form,
// saturated where f32 rounds tanh to +-1.
fn tanh_f(x: f32) -> f32 {
  let a = abs(x);
  if (a > 9.0) {
    return sign(x);
  }
  if (a < 0.5) {
    let z = x * x;
    let p = ((((((-929569.0 / 638512875.0 * z + 21844.0 / 6081075.0) * z - 1382.0 / 155925.0) * z +
               62.0 / 2835.0) * z - 17.0 / 315.0) * z + 2.0 / 15.0) * z - 1.0 / 3.0) * z;
    return x + x * p;
  }
  let e = exp(2.0 * a);
  return sign(x) * (1.0 - 2.0 / (e + 1.0));
}

// torch's gelu(approximate="tanh") in f32.
fn gelu_tanh(x: f32) -> f32 {
  let inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh_f(inner));
}

// Float-float sums for the workgroup kernels: a value is (hi, lo) with hi = fl(hi + lo), so a sum
// keeps about 44 bits and its result no longer depends on the order the invocations add in (the
// CPU reference sums in f64). TwoSum is exact in f32 arithmetic without FMA; the terms added are
// f32 products, rounded as a plain f32 dot product rounds them.
fn ff_norm(s: f32, e: f32) -> vec2<f32> {
  let h = s + e;
  return vec2<f32>(h, e - (h - s));
}

fn ff_add1(a: vec2<f32>, b: f32) -> vec2<f32> {
  let s = a.x + b;
  let bb = s - a.x;
  let e = (a.x - (s - bb)) + (b - bb);
  return ff_norm(s, e + a.y);
}

fn ff_add(a: vec2<f32>, b: vec2<f32>) -> vec2<f32> {
  let s = a.x + b.x;
  let bb = s - a.x;
  let e = (a.x - (s - bb)) + (b.x - bb);
  return ff_norm(s, e + (a.y + b.y));
}
