#version 450
#extension GL_EXT_control_flow_attributes : require
// The towers' linears (vulkan_tower.cc): y[t][r] = sum_c x[t][c] * w[r][c] for t < n, r < N, the
// products summed in f32 over 32-column tiles, as the fast CPU backend's f32 GEMM does (in another
// order). Dense weights (KIND 0 f32, 1 bf16, 2 f16) enter as their values; quantized ones (3 int2,
// 4 int4, 5 int8: codes LSB first in each word, int2 / int4 offset by 2 / 8) as their integer codes,
// and the sum is then multiplied by the row's scale in f64 (the reference's epilogue). Rows of w are
// `wstride` u32 words apart. Grid: (blocks of 64 rows of w, blocks of 64 tokens); 256 invocations,
// each 4 x 4 outputs. A clippable linear's bounds (flags 1: inputs, 2: outputs) clamp x as it is
// loaded and y as it is stored (ref::ClippedForward).
// CONV 1 (the audio tower's SSCP convolutions, f32 weights [cout][cin][3][3]): x is the im2col of
// a Conv2d(3x3, stride 2, pad 1) read in place: token t is output position (t / F2, t % F2), column
// c = ci 9 + kt 3 + kf; the input is channels-last [T][F][cin], its frames masked (mask[ti
// mstride] == 0: zeros, as the reference multiplies them by 0), padding taps zeros.
layout(local_size_x = 256) in;
layout(constant_id = 1) const uint KIND = 1;
layout(constant_id = 2) const uint CONV = 0;

layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) readonly buffer W { uint w[]; };
layout(std430, binding = 2) readonly buffer S { float scale[]; };
layout(std430, binding = 3) writeonly buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer M { uint mask[]; };  // CONV: per input frame

layout(push_constant) uniform P {
  uint n;        // tokens
  uint K;        // columns (x's row length)
  uint N;        // rows of w (y's row length)
  uint wstride;  // u32 words per row of w
  uint flags;    // 1: clamp x to [in_min, in_max]; 2: clamp y to [out_min, out_max]
  float in_min, in_max, out_min, out_max;
  uint cT, cF, cin, cF2, mstride;  // CONV: input frames, input freq, channels, output freq, mask
} p;

const uint BM = 64, BN = 64, BK = 32;
shared float xs[BM][BK + 1];
shared float ws[BN][BK + 1];

// f16 bits -> f32, exactly (subnormals included).
float F16Bits(uint h) {
  const uint s = (h & 0x8000u) << 16, e = (h >> 10) & 31u, m = h & 1023u;
  if (e == 0u) {
    const float v = float(m) * (1.0 / 16777216.0);
    return s != 0u ? -v : v;
  }
  if (e == 31u) return uintBitsToFloat(s | 0x7F800000u | (m << 13));
  return uintBitsToFloat(s | ((e + 112u) << 23) | (m << 13));
}

float Weight(uint r, uint c) {
  const uint base = r * p.wstride;
  if (KIND == 0) return uintBitsToFloat(w[base + c]);
  if (KIND == 1 || KIND == 2) {
    const uint h = (w[base + c / 2u] >> (16u * (c & 1u))) & 0xFFFFu;
    return KIND == 1 ? uintBitsToFloat(h << 16) : F16Bits(h);
  }
  const uint per = KIND == 3 ? 16u : KIND == 4 ? 8u : 4u;  // codes per word
  const uint bits = 32u / per;
  const uint word = w[base + c / per];
  const int off = int(bits * (c % per));
  const int code = KIND == 5 ? bitfieldExtract(int(word), off, 8)
                             : int(bitfieldExtract(word, off, int(bits))) - int(1u << (bits - 1u));
  return float(code);
}

// CONV: the im2col value at token t, column c.
float ConvIn(uint t, uint c) {
  const uint to = t / p.cF2, fo = t % p.cF2, ci = c / 9u, r = c % 9u;
  const int ti = int(2u * to + r / 3u) - 1, fi = int(2u * fo + r % 3u) - 1;
  if (ti < 0 || ti >= int(p.cT) || fi < 0 || fi >= int(p.cF)) return 0.0;
  if (mask[uint(ti) * p.mstride] == 0u) return 0.0;
  return x[(uint(ti) * p.cF + uint(fi)) * p.cin + ci];
}

void main() {
  const uint lid = gl_LocalInvocationID.x;
  const uint tx = lid % 16u, ty = lid / 16u;  // outputs: rows r0 + tx * 4 + j, tokens t0 + ty * 4 + i
  const uint r0 = gl_WorkGroupID.x * BN, t0 = gl_WorkGroupID.y * BM;
  float acc[4][4];
  [[unroll]] for (uint i = 0; i < 4; ++i)
    [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0; k0 < p.K; k0 += BK) {
    // 64 x 32 of x and of w: 8 elements each per invocation.
    [[unroll]] for (uint e = 0; e < 8; ++e) {
      const uint idx = lid + e * 256u;
      const uint row = idx / BK, col = idx % BK;
      const uint t = t0 + row, r = r0 + row, c = k0 + col;
      float xv = t < p.n && c < p.K ? (CONV == 1 ? ConvIn(t, c) : x[t * p.K + c]) : 0.0;
      if ((p.flags & 1u) != 0u) xv = min(max(xv, p.in_min), p.in_max);
      xs[row][col] = xv;
      ws[row][col] = r < p.N && c < p.K ? Weight(r, c) : 0.0;
    }
    barrier();
    for (uint k = 0; k < BK; ++k) {
      float a[4], b[4];
      [[unroll]] for (uint i = 0; i < 4; ++i) a[i] = xs[ty * 4u + i][k];
      [[unroll]] for (uint j = 0; j < 4; ++j) b[j] = ws[tx * 4u + j][k];
      [[unroll]] for (uint i = 0; i < 4; ++i)
        [[unroll]] for (uint j = 0; j < 4; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier();
  }
  [[unroll]] for (uint i = 0; i < 4; ++i) {
    const uint t = t0 + ty * 4u + i;
    if (t >= p.n) continue;
    [[unroll]] for (uint j = 0; j < 4; ++j) {
      const uint r = r0 + tx * 4u + j;
      if (r >= p.N) continue;
      float yv = KIND >= 3 ? float(double(acc[i][j]) * double(scale[r])) : acc[i][j];
      if ((p.flags & 2u) != 0u) yv = min(max(yv, p.out_min), p.out_max);
      y[t * p.N + r] = yv;
    }
  }
}
