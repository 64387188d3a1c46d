// attention_wg.wgsl split over the keys, for steps with few query rows (decode, short chunks):
// a workgroup per (split, head, token) takes `chunk` consecutive keys of its token's range, so a
// one-token step spreads over many workgroups instead of one per head. Three dispatches, so that
// every weight is exp(s - max) with the maximum over all the keys, bit for bit as attention_wg
// computes it:
//   phase 0: the maximum score of the split's keys -> mx[row * splits + split];
//   phase 1: the maximum over the row's splits, then the split's weights (its scores computed
//            again by the same function, so the same bits), their float-float sum and the
//            float-float sums of the weighted value rows -> part[(row * splits + split) * (2 + 2 hd)]:
//            (sum hi, sum lo, then (hi, lo) per output dimension);
//   attention_merge_wg.wgsl adds the splits' float-float sums and divides.
// row = token * heads + head. A split whose range is empty writes -3.4e38 and zero sums.
struct P {
  n: u32, heads: u32, hd: u32, group: u32,
  kv_width: u32, pos0: u32, window: u32, ring: u32,
  splits: u32, chunk: u32, phase: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
@group(0) @binding(4) var<storage, read_write> mx: array<f32>;
@group(0) @binding(5) var<storage, read_write> part: array<f32>;

var<workgroup> qs: array<f32, 512>;
var<workgroup> ew: array<f32, 64>;
var<workgroup> red: array<f32, 64>;

// attention_wg.wgsl's score, unchanged (the same products in the same order).
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

// The maximum of one value per invocation; every invocation gets it.
fn workgroup_max(v: f32, li: u32) -> f32 {
  red[li] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (li < s) {
      red[li] = max(red[li], red[li + s]);
    }
    workgroupBarrier();
  }
  let m = red[0];
  workgroupBarrier();
  return m;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let sp = wg.x;
  let h = wg.y;
  let t = wg.z;
  if (sp >= p.splits || h >= p.heads || t >= p.n) {
    return;
  }
  let pos = p.pos0 + t;
  var first = 0u;
  if (p.window > 0u && pos + 1u > p.window) {
    first = pos + 1u - p.window;
  }
  // This split's keys: [lo, hi) within [first, pos].
  let lo = first + sp * p.chunk;
  let hi = min(lo + p.chunk, pos + 1u);
  let row = t * p.heads + h;
  let slot = row * p.splits + sp;
  let qb = row * p.hd;
  let kvo = (h / p.group) * p.hd;
  for (var i = li; i < p.hd; i += 64u) {
    qs[i] = q[qb + i];
  }
  workgroupBarrier();

  if (p.phase == 0u) {
    var m = -3.4e38;
    for (var j = lo + li; j < hi; j += 64u) {
      m = max(m, score(j, kvo));
    }
    m = workgroup_max(m, li);
    if (li == 0u) {
      mx[slot] = m;
    }
    return;
  }

  var m = -3.4e38;
  for (var s = li; s < p.splits; s += 64u) {
    m = max(m, mx[row * p.splits + s]);
  }
  m = workgroup_max(m, li);

  var sum = vec2<f32>(0.0, 0.0);
  var acc: array<vec2<f32>, 8>;
  for (var k = 0u; k < 8u; k++) {
    acc[k] = vec2<f32>(0.0, 0.0);
  }
  for (var j0 = lo; j0 < hi; j0 += 64u) {
    let j = j0 + li;
    var e = 0.0;
    if (j < hi) {
      e = exp(score(j, kvo) - m);
      sum = ff_add1(sum, e);
    }
    ew[li] = e;
    workgroupBarrier();
    let nb = min(64u, hi - j0);
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
  let pb = slot * (2u + 2u * p.hd);
  if (li == 0u) {
    part[pb] = tot.x;
    part[pb + 1u] = tot.y;
  }
  for (var k = 0u; k < 8u; k++) {
    let d = li + 64u * k;
    if (d < p.hd) {
      part[pb + 2u + 2u * d] = acc[k].x;
      part[pb + 3u + 2u * d] = acc[k].y;
    }
  }
}
