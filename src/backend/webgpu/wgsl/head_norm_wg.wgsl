// head_norm.wgsl with a workgroup per head and token (GPU adapters): the sum of squares in
// float-float across 64 invocations, then each invocation normalizes, rotates and stores its pairs.
struct P {
  n: u32, heads: u32, hd: u32, has_w: u32,
  rope: u32, to_cache: u32, pos0: u32, ring: u32,
  dst_off: u32, cs_off: u32, eps: f32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> cs: array<f32>;  // [n][hd]: cos of each pair, then sin
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wg.x;
  let t = wg.y;
  if (h >= p.heads || t >= p.n) {
    return;
  }
  let width = p.heads * p.hd;
  let sb = t * width + h * p.hd;
  var db = p.dst_off + sb;
  if (p.to_cache != 0u) {
    db = p.dst_off + ((p.pos0 + t) % p.ring) * width + h * p.hd;
  }
  var ss = vec2<f32>(0.0, 0.0);
  for (var i = li; i < p.hd; i += 64u) {
    ss = ff_add1(ss, src[sb + i] * src[sb + i]);
  }
  let tot = ff_workgroup_sum(ss, li);
  let inv = inverseSqrt(tot.x / f32(p.hd) + tot.y / f32(p.hd) + p.eps);
  let half = p.hd / 2u;
  for (var i = li; i < half; i += 64u) {
    var a = src[sb + i] * inv;
    var b = src[sb + i + half] * inv;
    if (p.has_w != 0u) {
      a = a * w[i];
      b = b * w[i + half];
    }
    if (p.rope != 0u) {
      let c = cs[p.cs_off + t * p.hd + i];
      let s = cs[p.cs_off + t * p.hd + half + i];
      let ra = a * c + (-b) * s;
      let rb = b * c + a * s;
      a = ra;
      b = rb;
    }
    dst[db + i] = a;
    dst[db + i + half] = b;
  }
}
