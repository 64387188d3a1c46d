// head_norm.wgsl with a workgroup per head and token (GPU adapters): the sum of squares in
// float-float across 64 invocations, then each invocation normalizes, rotates and stores its pairs.
// With kv_heads > 0, one dispatch does a layer's three head norms (grid x = heads + 2 kv_heads):
// the query heads as without it (rows of heads x hd at the start of src), then the key heads
// (rows of kv_heads x hd at k_off in src, weights w2 when has_w2, rotated when rope) and the value
// heads (at v_off, no weights, not rotated), both stored into their caches' ring rows (dstk,
// dstv). Each head's operations are the single-head dispatch's, so the same bits as three
// dispatches.
struct P {
  n: u32, heads: u32, hd: u32, has_w: u32,
  rope: u32, to_cache: u32, pos0: u32, ring: u32,
  dst_off: u32, cs_off: u32, eps: f32, kv_heads: u32,
  k_off: u32, v_off: u32, has_w2: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> cs: array<f32>;  // [n][hd]: cos of each pair, then sin
@group(0) @binding(4) var<storage, read_write> dst: array<f32>;
@group(0) @binding(5) var<storage, read> w2: array<f32>;
@group(0) @binding(6) var<storage, read_write> dstk: array<f32>;
@group(0) @binding(7) var<storage, read_write> dstv: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let t = wg.y;
  // Section 0: the heads of dst; 1, 2: the key and value heads (kv_heads > 0).
  var h = wg.x;
  var sec = 0u;
  if (h >= p.heads) {
    if (p.kv_heads == 0u) {
      return;
    }
    h -= p.heads;
    sec = 1u + h / p.kv_heads;
    h = h % p.kv_heads;
  }
  if (sec > 2u || t >= p.n) {
    return;
  }
  let heads = select(p.kv_heads, p.heads, sec == 0u);
  let has_w = select(select(0u, p.has_w2, sec == 1u), p.has_w, sec == 0u) != 0u;
  let rope = p.rope != 0u && sec < 2u;
  let to_cache = sec > 0u || p.to_cache != 0u;
  let width = heads * p.hd;
  let sb = select(select(p.v_off, p.k_off, sec == 1u), 0u, sec == 0u) + t * width + h * p.hd;
  var db = p.dst_off + t * width + h * p.hd;
  if (to_cache) {
    db = select(0u, p.dst_off, sec == 0u) + ((p.pos0 + t) % p.ring) * width + h * p.hd;
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
    if (has_w && sec == 0u) {
      a = a * w[i];
      b = b * w[i + half];
    } else if (has_w) {
      a = a * w2[i];
      b = b * w2[i + half];
    }
    if (rope) {
      let c = cs[p.cs_off + t * p.hd + i];
      let s = cs[p.cs_off + t * p.hd + half + i];
      let ra = a * c + (-b) * s;
      let rb = b * c + a * s;
      a = ra;
      b = rb;
    }
    if (sec == 0u) {
      dst[db + i] = a;
      dst[db + i + half] = b;
    } else if (sec == 1u) {
      dstk[db + i] = a;
      dstk[db + i + half] = b;
    } else {
      dstv[db + i] = a;
      dstv[db + i + half] = b;
    }
  }
}
