// Shared declarations for every kernel: the one descriptor-set layout (12 storage buffers) and
// the exact helpers of the numerics contract (see reference_ops.h).
#extension GL_EXT_control_flow_attributes : enable

// f32 quotient z / s rounded as IEEE division does: the approximate quotient z * (1 / s) is
// corrected with its exact residual (fma; Markstein's correction: correctly rounded when the
// reciprocal is and the first quotient is within an ulp), so SRQ rounding boundaries match the CPU
// reference. ExactDivR takes the reciprocal `rs` = 1.0 / s (SrqReciprocal) from the caller, for
// loops that divide by one scale: one division per loop instead of one per element.
float ExactDivR(float z, float s, float rs) {
  precise float q0 = z * rs;
  precise float r = fma(-q0, s, z);
  precise float q = fma(r, rs, q0);
  return q;
}

float SrqReciprocal(float s) {
  precise float rs = 1.0 / s;
  return rs;
}

float ExactDiv(float z, float s) { return ExactDivR(z, s, SrqReciprocal(s)); }

// transformers' apply_srq as an int: clamp(round_half_even(z / s), -128, 127), z / s the IEEE f32
// quotient (the CPU reference's). Only the quotient's side of the nearest half-integer matters: the
// f32 estimate z * rs decides it unless it lies within 2^-19 of its magnitude from a half-integer
// (its error is a few ulps, 2^-21 at most, where 1 / s is the device's approximate reciprocal),
// and there the quotient is taken as float(double(z) / double(s)), which is the IEEE f32 quotient
// (rounding a quotient of floats twice through double is innocuous). ExactDivR's correction is not
// used here: SPIR-V's Fma may be evaluated unfused (lavapipe does), and then its quotient can land
// on the other side of a half-integer: issue 34 (layer 3's gate input -42.5000018 quanta:
// z * rs = -42.500004, rounded to -43 where the reference's quotient -42.5 rounds to -42).
int QuantizeSrqR(float z, float s, float rs) {
  precise float q = z * rs;
  precise float off = abs(q - floor(q) - 0.5);
  if (abs(q) < 256.0 && off <= abs(q) * (1.0 / 524288.0)) q = float(double(z) / double(s));
  return int(clamp(roundEven(q), -128.0, 127.0));
}

int QuantizeSrq(float z, float s) { return QuantizeSrqR(z, s, SrqReciprocal(s)); }

float Srq(float z, float s) {
  precise float y = float(QuantizeSrq(z, s)) * s;
  return y;
}

// (a * b) * c in double, rounded once (the reference's int64 accumulator times scales in double).
float Mul3(float a, float b, float c) { return float(double(a) * double(b) * double(c)); }

// exp in double precision (GLSL has no double exp): Cody-Waite reduction by ln 2 and a
// degree-13 Taylor polynomial; accurate to a few ulp of double.
double ExpD(double x) {
  if (x < -745.0LF) return 0.0LF;
  if (x > 709.0LF) return 1.0LF / 0.0LF;
  const double k = roundEven(x * 1.4426950408889634LF);
  const double r = (x - k * 0.693147180369123816490LF) - k * 1.90821492927058770002e-10LF;
  double p = 1.0LF / 6227020800.0LF;
  p = fma(p, r, 1.0LF / 479001600.0LF);
  p = fma(p, r, 1.0LF / 39916800.0LF);
  p = fma(p, r, 1.0LF / 3628800.0LF);
  p = fma(p, r, 1.0LF / 362880.0LF);
  p = fma(p, r, 1.0LF / 40320.0LF);
  p = fma(p, r, 1.0LF / 5040.0LF);
  p = fma(p, r, 1.0LF / 720.0LF);
  p = fma(p, r, 1.0LF / 120.0LF);
  p = fma(p, r, 1.0LF / 24.0LF);
  p = fma(p, r, 1.0LF / 6.0LF);
  p = fma(p, r, 0.5LF);
  p = fma(p, r, 1.0LF);
  p = fma(p, r, 1.0LF);
  return ldexp(p, int(k));
}

// tanh rounded to f32 from a double evaluation (matches the C library's tanhf to the ulp).
float TanhF(float x) {
  if (abs(x) > 20.0) return sign(x);
  const double e = ExpD(2.0LF * double(x));
  if (abs(x) < 1e-4) {
    const double d = double(x);
    return float(d - d * d * d / 3.0LF);
  }
  return float((e - 1.0LF) / (e + 1.0LF));
}

float TanhClamped(float x) { return TanhF(x); }

// torch's gelu(approximate="tanh") in f32, operation by operation like the reference.
float GeluTanh(float x) {
  const float kBeta = 0.7978845608028654;
  const float kKappa = 0.044715;
  precise float x3 = kKappa * x * x * x;
  precise float inner = kBeta * (x + x3);
  precise float g = 0.5 * x * (1.0 + TanhF(inner));
  return g;
}

// A split-K linear's output from its summed int32 dot product (linear_cm_epi, linear.comp KSPLIT):
// times the input and row scales in double, the SRQ output rounding, then the epilogue (0 the
// value, 2 softcap at `cap`, 3 gelu times `aux`).
float SplitKOut(int sum, float in_s, float rs, float out_s, uint epi, float cap, float aux) {
  float r = float(double(sum) * double(in_s) * double(rs));
  if (out_s > 0.0) r = Srq(r, out_s);
  if (epi == 2 && cap > 0.0) return TanhClamped(ExactDiv(r, cap)) * cap;
  if (epi == 3) return GeluTanh(r) * aux;
  return r;
}

// 1 / sqrt(double(ms)) rounded to f32 without the double division and square root (library calls
// of ~100 instructions each on the NVIDIA driver): the f32 estimate and two Newton steps in double
// (to double precision), then rounded: the same value except where the exact one lies within a few
// double ulps of an f32 rounding boundary.
float InvSqrtNewton(float ms) {
  double y = double(inversesqrt(ms));
  const double hm = 0.5LF * double(ms);
  y = y * (1.5LF - hm * y * y);
  y = y * (1.5LF - hm * y * y);
  return float(y);
}

// RmsFactor without the double division and square root (library calls of ~100 instructions each
// on the NVIDIA driver), for a length n known when the kernel is compiled: the mean by the
// constant reciprocal of n with one exact correction, then InvSqrtNewton. The one-token steps'
// norm prologues (linear.comp RMS_FAST) and the other steps' norm kernels (resnorm.comp FAST_N)
// both take it, so a batch's rows and verification steps give the one-token steps' bits.
float RmsFactorConstN(double tot, uint n, float eps) {
  const double rn = 1.0LF / double(n);
  const double q0 = tot * rn;
  const double q = fma(fma(-q0, double(n), tot), rn, q0);
  precise float ms = float(q) + eps;
  return InvSqrtNewton(ms);
}

// RMSNorm's factor pow(float(ss / n) + eps, -0.5f) with ss summed in double, as the reference.
float RmsFactor(double ss, uint n, float eps) {
  precise float ms = float(ss / double(n)) + eps;
  return float(1.0LF / sqrt(double(ms)));
}

// Per-step values written by the host before each submission (copied with the step's inputs).
layout(std430, set = 0, binding = 11) readonly buffer StepBuf {
  uint pos0;  // position of the chunk's first token
  uint m;     // tokens in the chunk
  uint row0;  // first output row (head)
  uint pad;
} step;
