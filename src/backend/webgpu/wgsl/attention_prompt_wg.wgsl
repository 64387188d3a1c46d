// attention_wg.wgsl's one pass for prompt chunks (GPU adapters): a workgroup of 256 invocations
// per token and up to 8 query heads of one key/value head, so the heads that share the keys read
// each key and value row once (attention_wg: once per head). Invocations 32 h .. 32 h + 31 serve
// head h of the set; for a block of 32 keys, invocation lane scores key j0 + lane (attention_wg's
// score_part for a team of one: blocks of 8 products added pairwise in f32, the blocks in
// float-float; the block's key rows staged in workgroup memory 64 dimensions at a time, loaded
// coalesced by the whole workgroup), then each invocation adds the weighted value rows to its
// output dimensions d = lane, lane + 32, ... (head_dim <= 512): the products of 8 keys in f32,
// those sums in float-float. One pass over the keys: the weights are exp(s - m) with m the
// maximum of the head's scores so far; where a block raises it, the weight sum and the value
// sums so far are scaled by exp(m_old - m_new) (attention_merge_wg's rescaling, per block);
// out = sums / weight sum.
// q: the normalized, rotated query rows [n][heads][hd] (head_norm_wg); head_dim a multiple of 8,
// kv_width of 4. Workgroups: x = key/value head x head sets of 8, y = token.
struct P {
  n: u32, heads: u32, hd: u32, group: u32,
  kv_width: u32, pos0: u32, window: u32, ring: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> kc: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;

var<workgroup> ew: array<f32, 256>;         // a block's weights, [head][key]
var<workgroup> red: array<vec2<f32>, 256>;  // the maxima, then the weight sums
// A block's 32 key rows, 64 dimensions of each: [key][dimension], rows padded to 65 floats so
// that the 32 keys' invocations read 32 banks.
const KS: u32 = 65u;
var<workgroup> ks: array<f32, 2080>;

// The scores q . K_j of keys j0 + lane (lane < nb) for this invocation's head (q at vector qb):
// attention_wg's score_part for a team of one, the blocks of 8 dimensions in order. Call from
// uniform control flow (barriers).
fn score_block(qb: u32, j0: u32, nb: u32, kvo: u32, li: u32, lane: u32) -> f32 {
  var s = vec2<f32>(0.0, 0.0);
  // (what this invocation stages: key li / 8, dimensions 8 (li % 8) .. + 7 of the 64)
  let sk = li / 8u;
  let sd = (li % 8u) * 8u;
  let sb = (((j0 + sk) % p.ring) * p.kv_width + kvo + sd) / 4u;
  for (var d0 = 0u; d0 < p.hd; d0 += 64u) {
    workgroupBarrier();  // (the previous dimensions read)
    if (sk < nb && d0 + sd < p.hd) {
      let a = kc[sb + d0 / 4u];
      let b = kc[sb + d0 / 4u + 1u];
      let o = sk * KS + sd;
      ks[o] = a.x;
      ks[o + 1u] = a.y;
      ks[o + 2u] = a.z;
      ks[o + 3u] = a.w;
      ks[o + 4u] = b.x;
      ks[o + 5u] = b.y;
      ks[o + 6u] = b.z;
      ks[o + 7u] = b.w;
    }
    workgroupBarrier();
    if (lane < nb) {
      let kb = lane * KS;
      for (var i = 0u; i < min(8u, (p.hd - d0) / 8u); i++) {
        let q0 = q[qb + (d0 / 4u) + 2u * i];
        let q1 = q[qb + (d0 / 4u) + 2u * i + 1u];
        let k = kb + 8u * i;
        let a = (q0.x * ks[k] + q0.y * ks[k + 1u]) + (q0.z * ks[k + 2u] + q0.w * ks[k + 3u]);
        let b = (q1.x * ks[k + 4u] + q1.y * ks[k + 5u]) + (q1.z * ks[k + 6u] + q1.w * ks[k + 7u]);
        s = ff_add1(s, a + b);
      }
    }
  }
  return s.x + s.y;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let sets = (p.group + 7u) / 8u;
  let kvh = wg.x / sets;
  let t = wg.y;
  if (t >= p.n) {
    return;
  }
  let hl = li / 32u;
  let lane = li % 32u;
  let hg = (wg.x % sets) * 8u + hl;  // the head within its group
  let in_set = hg < p.group;
  // (an invocation past the group's heads computes head 0's values and stores nothing)
  let h = kvh * p.group + select(0u, hg, in_set);
  let pos = p.pos0 + t;
  var first = 0u;
  if (p.window > 0u && pos + 1u > p.window) {
    first = pos + 1u - p.window;
  }
  let row = t * p.heads + h;
  let qb = row * p.hd / 4u;
  let kvo = kvh * p.hd;

  var m = -3.4e38;  // the head's maximum score so far
  var den = vec2<f32>(0.0, 0.0);
  var acc: array<vec2<f32>, 16>;
  for (var k = 0u; k < 16u; k++) {
    acc[k] = vec2<f32>(0.0, 0.0);
  }
  for (var j0 = first; j0 <= pos; j0 += 32u) {
    let nb = min(32u, pos + 1u - j0);
    let s = score_block(qb, j0, nb, kvo, li, lane);
    // The block's maximum (its scores through ew; score_block's barriers: the previous block's
    // weights read), the new running maximum and the old sums' scale.
    ew[li] = s;
    workgroupBarrier();
    var bm = -3.4e38;
    for (var k = 0u; k < nb; k++) {
      bm = max(bm, ew[hl * 32u + k]);
    }
    let mn = max(m, bm);
    if (mn > m) {
      let f = exp(m - mn);
      den = den * f;
      for (var k = 0u; k < 16u; k++) {
        acc[k] = acc[k] * f;
      }
      m = mn;
    }
    var e = 0.0;
    if (lane < nb) {
      e = exp(s - m);
      den = ff_add1(den, e);
    }
    workgroupBarrier();  // (the scores read)
    ew[li] = e;
    workgroupBarrier();
    for (var jb = 0u; jb < nb; jb += 8u) {
      var blk: array<f32, 16>;
      for (var k = 0u; k < 16u; k++) {
        blk[k] = 0.0;
      }
      for (var jj = jb; jj < min(jb + 8u, nb); jj++) {
        let ej = ew[hl * 32u + jj];
        let vb = ((j0 + jj) % p.ring) * p.kv_width + kvo;
        for (var k = 0u; k < 16u; k++) {
          let d = lane + 32u * k;
          if (d < p.hd) {
            blk[k] += ej * vc[vb + d];
          }
        }
      }
      for (var k = 0u; k < 16u; k++) {
        acc[k] = ff_add1(acc[k], blk[k]);
      }
    }
  }
  red[li] = den;
  workgroupBarrier();
  var tot = vec2<f32>(0.0, 0.0);
  for (var k = 0u; k < 32u; k++) {
    tot = ff_add(tot, red[hl * 32u + k]);
  }
  let total = tot.x + tot.y;
  if (in_set) {
    for (var k = 0u; k < 16u; k++) {
      let d = lane + 32u * k;
      if (d < p.hd) {
        o[row * p.hd + d] = (acc[k].x + acc[k].y) / total;
      }
    }
  }
}
