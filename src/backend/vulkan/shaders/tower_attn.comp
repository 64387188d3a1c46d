#version 450
// The vision tower's attention (vulkan_tower.cc): bidirectional, scale 1, over n tokens; query
// head h reads key/value head h / (NH / NKV). q [n][NH HD], k and v [n][NKV HD], out [n][NH HD];
// queries q0 .. q0 + m (rows of q and out are indexed from q0). One invocation per query and head
// with an online softmax in f32 (scores, running maximum and sum, the weighted values), keys and
// values through shared memory 32 at a time. Grid: (blocks of 64 queries, NH).
layout(local_size_x = 64) in;
layout(constant_id = 1) const uint HD = 64;  // head dim (at most 128)
layout(constant_id = 2) const uint NH = 1;
layout(constant_id = 3) const uint NKV = 1;

layout(std430, binding = 0) readonly buffer Q { float q[]; };
layout(std430, binding = 1) readonly buffer K { float k[]; };
layout(std430, binding = 2) readonly buffer V { float v[]; };
layout(std430, binding = 3) writeonly buffer O { float o[]; };

layout(push_constant) uniform P {
  uint n;   // keys (tokens)
  uint q0;  // first query
  uint m;   // queries
} p;

const uint TK = 32;
shared float ks[TK][HD];
shared float vs[TK][HD];

void main() {
  const uint i = gl_GlobalInvocationID.x, h = gl_WorkGroupID.y;
  const uint kvh = h / (NH / NKV);
  const bool live = i < p.m;
  float qv[HD], acc[HD];
  const uint qrow = (p.q0 + i) * NH * HD + h * HD;
  for (uint d = 0; d < HD; ++d) {
    qv[d] = live ? q[qrow + d] : 0.0;
    acc[d] = 0.0;
  }
  float mx = -1.0 / 0.0, sum = 0.0;
  for (uint j0 = 0; j0 < p.n; j0 += TK) {
    const uint tile = min(TK, p.n - j0);
    for (uint e = gl_LocalInvocationID.x; e < tile * HD; e += 64u) {
      const uint j = e / HD, d = e % HD;
      const uint at = (j0 + j) * NKV * HD + kvh * HD + d;
      ks[j][d] = k[at];
      vs[j][d] = v[at];
    }
    barrier();
    for (uint j = 0; j < tile; ++j) {
      float s = 0.0;
      for (uint d = 0; d < HD; ++d) s = fma(qv[d], ks[j][d], s);
      if (s > mx) {
        const float c = exp(mx - s);  // (0 at the first key)
        sum *= c;
        for (uint d = 0; d < HD; ++d) acc[d] *= c;
        mx = s;
      }
      const float e = exp(s - mx);
      sum += e;
      for (uint d = 0; d < HD; ++d) acc[d] = fma(e, vs[j][d], acc[d]);
    }
    barrier();
  }
  if (!live) return;
  const uint orow = (p.q0 + i) * NH * HD + h * HD;
  for (uint d = 0; d < HD; ++d) o[orow + d] = acc[d] / sum;
}
