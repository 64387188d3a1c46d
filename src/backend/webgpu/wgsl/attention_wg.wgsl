// attention.wgsl with a workgroup per query head and token (GPU adapters). Keys in blocks of 64,
// one key per invocation: its score is that invocation's dot with the query (held in workgroup
// memory), in float-float over blocks of 8; the maximum over the keys is reduced first (the first
// 2,048 scores kept in workgroup memory for the second pass), then each block's weights
// exp(s - max) go through workgroup memory and every invocation accumulates its own output
// dimensions (d = lane, lane + 64, ...; head_dim <= 512) in float-float, reading the value rows
// coalesced. The denominator is a float-float tree over the invocations' sums.
struct P {
  n: u32, heads: u32, hd: u32, group: u32,
  kv_width: u32, pos0: u32, window: u32, ring: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;

var<workgroup> qs: array<f32, 512>;
var<workgroup> ew: array<f32, 64>;
var<workgroup> red: array<f32, 64>;
// The scores of the first 2,048 keys, kept from the first pass (later keys are scored again).
const KEEP: u32 = 2048u;
var<workgroup> sc: array<f32, 2048>;

// q . K_j: blocks of 8 products summed pairwise in f32 (a fixed order, short dependency
// chains), the blocks (and a tail of single products) in float-float.
fn score(j: u32, kvo: u32) -> f32 {
  let kb = (j % p.ring) * p.kv_width + kvo;
  var s = vec2<f32>(0.0, 0.0);
  var i = 0u;
  for (; i + 8u <= p.hd; i += 8u) {
    let a = (qs[i] * kc[kb + i] + qs[i + 1u] * kc[kb + i + 1u]) +
            (qs[i + 2u] * kc[kb + i + 2u] + qs[i + 3u] * kc[kb + i + 3u]);
    let b = (qs[i + 4u] * kc[kb + i + 4u] + qs[i + 5u] * kc[kb + i + 5u]) +
            (qs[i + 6u] * kc[kb + i + 6u] + qs[i + 7u] * kc[kb + i + 7u]);
    s = ff_add1(s, a + b);
  }
  for (; i < p.hd; i++) {
    s = ff_add1(s, qs[i] * kc[kb + i]);
  }
  return s.x + s.y;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wg.x;
  let t = wg.y;
  if (h >= p.heads || t >= p.n) {
    return;
  }
  let pos = p.pos0 + t;
  var first = 0u;
  if (p.window > 0u && pos + 1u > p.window) {
    first = pos + 1u - p.window;
  }
  let qb = (t * p.heads + h) * p.hd;
  let kvo = (h / p.group) * p.hd;
  for (var i = li; i < p.hd; i += 64u) {
    qs[i] = q[qb + i];
  }
  workgroupBarrier();

  var mx = -3.4e38;
  for (var j = first + li; j <= pos; j += 64u) {
    let s = score(j, kvo);
    if (j - first < KEEP) {
      sc[j - first] = s;
    }
    mx = max(mx, s);
  }
  red[li] = mx;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (li < s) {
      red[li] = max(red[li], red[li + s]);
    }
    workgroupBarrier();
  }
  mx = red[0];
  workgroupBarrier();

  var sum = vec2<f32>(0.0, 0.0);
  var acc: array<vec2<f32>, 8>;
  for (var k = 0u; k < 8u; k++) {
    acc[k] = vec2<f32>(0.0, 0.0);
  }
  for (var j0 = first; j0 <= pos; j0 += 64u) {
    let j = j0 + li;
    var e = 0.0;
    if (j <= pos) {
      var s = 0.0;
      if (j - first < KEEP) {
        s = sc[j - first];
      } else {
        s = score(j, kvo);
      }
      e = exp(s - mx);
      sum = ff_add1(sum, e);
    }
    ew[li] = e;
    workgroupBarrier();
    let nb = min(64u, pos + 1u - j0);
    for (var jj = 0u; jj < nb; jj++) {
      let ej = ew[jj];
      let vb = ((j0 + jj) % p.ring) * p.kv_width + kvo;
      for (var k = 0u; k < 8u; k++) {
        let d = li + 64u * k;
        if (d < p.hd) {
          acc[k] = ff_add1(acc[k], ej * vc[vb + d]);
        }
      }
    }
    workgroupBarrier();
  }
  let tot = ff_workgroup_sum(sum, li);
  let total = tot.x + tot.y;
  for (var k = 0u; k < 8u; k++) {
    let d = li + 64u * k;
    if (d < p.hd) {
      o[qb + d] = (acc[k].x + acc[k].y) / total;
    }
  }
}
