// One head of one token per invocation: RMSNorm over head_dim (with or without weight), then RoPE
// (half-split pairing i <-> i + d/2) from the host's cos / sin table of the token, then the store:
// to dst in the source layout (queries), or to the token's cache slot (keys, values: position p
// at p % ring).
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
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let h = g.x;
  let t = g.y;
  if (h >= p.heads || t >= p.n) {
    return;
  }
  let width = p.heads * p.hd;
  let sb = t * width + h * p.hd;
  var db = p.dst_off + sb;
  if (p.to_cache != 0u) {
    db = p.dst_off + ((p.pos0 + t) % p.ring) * width + h * p.hd;
  }
  var ss = 0.0;
  for (var i = 0u; i < p.hd; i++) {
    ss += src[sb + i] * src[sb + i];
  }
  let inv = inverseSqrt(ss / f32(p.hd) + p.eps);
  let half = p.hd / 2u;
  for (var i = 0u; i < half; i++) {
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
