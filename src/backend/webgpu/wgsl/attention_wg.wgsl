// Attention with a workgroup per query head and token (GPU adapters; attention.wgsl is the row
// kernel). Keys in blocks of 64, one key per invocation: its score is that invocation's dot with
// the query (held in workgroup memory), in float-float over blocks of 8. Every weight is
// exp(s - max) with the maximum over the row's keys; every invocation accumulates its own output
// dimensions (d = lane, lane + 64, ...; head_dim <= 512) in float-float, reading the value rows
// coalesced, and the denominator is a float-float sum over the invocations' sums (the maximum and
// that sum: ff_workgroup_sum and workgroup_max of the family's reduction prelude,
// prelude_workgroup.wgsl or prelude_subgroups.wgsl). Three ways:
//   phase 2, one dispatch over (heads, tokens): the maximum first (the first 2,048 scores kept in
//            workgroup memory for the second pass), then the weights and sums, out -> o;
//   phase 1, split over the keys, for steps with few query rows (decode, short chunks): a
//            workgroup per (split, head, token) takes `chunk` consecutive keys of its token's
//            range, so a one-token step spreads over many workgroups instead of one per head:
//            phase 2's pass over the split's keys, with the split's own maximum ->
//            o[row * splits + split], the float-float sum of its weights and the float-float
//            sums of its weighted value rows -> part[(row * splits + split) * (2 + 2 hd)]: (sum
//            hi, sum lo, then (hi, lo) per output dimension); then attention_merge_wg.wgsl
//            scales each split's sums by exp(its maximum - the row's), adds and divides. (Two
//            dispatches: the row's maximum first, in a dispatch of its own, kept every weight
//            phase 2's bits but cost a third.)
// row = token * heads + head. A split whose range is empty writes -3.4e38 and zero sums.
// With q_norm, q holds the raw query rows and each workgroup applies the query's head norm (weights
// qw when has_w) and RoPE (cs rows from cs_off) itself, as head_norm_wg.wgsl's query heads do
// (the same operations, so the same bits): a layer without key and value heads of its own then
// records no head-norm dispatch.
struct P {
  n: u32, heads: u32, hd: u32, group: u32,
  kv_width: u32, pos0: u32, window: u32, ring: u32,
  splits: u32, chunk: u32, phase: u32, q_norm: u32,
  has_w: u32, cs_off: u32, eps: f32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;     // outputs, or phase 1's maxima
@group(0) @binding(5) var<storage, read_write> part: array<f32>;  // phase 1's sums
@group(0) @binding(6) var<storage, read> qw: array<f32>;  // q_norm's weights
@group(0) @binding(7) var<storage, read> cs: array<f32>;  // q_norm's [n][hd]: cos, then sin

var<workgroup> qs: array<f32, 512>;
var<workgroup> ew: array<f32, 64>;
// The scores of a block of keys; a pass keeps those of its first 2,048 keys from the first pass
// over them (later keys are scored again in the block at KEEP).
const KEEP: u32 = 2048u;
var<workgroup> sc: array<f32, 2112>;

// Key j's share of q . K_j held by this lane of its team (the family's teams: one invocation, or a
// subgroup): blocks of 8 products summed pairwise in f32 (a fixed order, short dependency chains)
// and the tail's single products, the lane's blocks and products (rank, rank + size, ...) in
// float-float. A team of one adds every block in order.
fn score_part(j: u32, kvo: u32, lane: vec2<u32>) -> vec2<f32> {
  let kb = (j % p.ring) * p.kv_width + kvo;
  var s = vec2<f32>(0.0, 0.0);
  let blocks = p.hd / 8u;
  for (var bi = lane.x; bi < blocks; bi += lane.y) {
    let i = bi * 8u;
    let a = (qs[i] * kc[kb + i] + qs[i + 1u] * kc[kb + i + 1u]) +
            (qs[i + 2u] * kc[kb + i + 2u] + qs[i + 3u] * kc[kb + i + 3u]);
    let b = (qs[i + 4u] * kc[kb + i + 4u] + qs[i + 5u] * kc[kb + i + 5u]) +
            (qs[i + 6u] * kc[kb + i + 6u] + qs[i + 7u] * kc[kb + i + 7u]);
    s = ff_add1(s, a + b);
  }
  for (var i = blocks * 8u + lane.x; i < p.hd; i += lane.y) {
    s = ff_add1(s, qs[i] * kc[kb + i]);
  }
  return s;
}

// The scores of keys j0 .. j0 + nb - 1 (nb <= 64) into sc[off ..]: key j0 + k by team k (then
// k + teams, ...), its lanes' shares added by team_ff_sum. With teams of one, invocation k scores
// key j0 + k and only it reads sc[off + k]; with subgroups the barriers order the block's writes
// after the previous reads and before the next ones. Call from uniform control flow.
fn score_block(j0: u32, nb: u32, kvo: u32, off: u32, teams: u32) {
  let lane = team_lane();
  team_sync();
  for (var it = 0u; it < (nb + teams - 1u) / teams; it++) {
    let k = team + it * teams;
    // A team past the block takes no share (but still joins team_ff_sum: uniform control flow).
    let s = team_ff_sum(score_part(j0 + k, kvo, select(lane, vec2<u32>(p.hd, 1u), k >= nb)));
    if (k < nb && lane.x == 0u) {
      sc[off + k] = s.x + s.y;
    }
  }
  team_sync();
}

// The weighted value rows of keys j0 .. j0 + nb - 1 (their weights in ew) added to this
// invocation's output dimensions.
fn add_values(j0: u32, nb: u32, kvo: u32, li: u32, acc: ptr<function, array<vec2<f32>, 8>>) {
  for (var jj = 0u; jj < nb; jj++) {
    let ej = ew[jj];
    let vb = ((j0 + jj) % p.ring) * p.kv_width + kvo;
    for (var k = 0u; k < 8u; k++) {
      let d = li + 64u * k;
      if (d < p.hd) {
        (*acc)[k] = ff_add1((*acc)[k], ej * vc[vb + d]);
      }
    }
  }
}

// Keys j0 .. j0 + nb - 1 with their scores at sc[off ..]: each weight exp(score - mx) added to
// this invocation's share of the denominator (float-float) and shared in ew, then the weighted
// value rows added to the output dimensions (the one pass and the split's phase 1 alike).
fn weigh_and_add(j0: u32, nb: u32, kvo: u32, off: u32, mx: f32, li: u32,
                 sum: ptr<function, vec2<f32>>, acc: ptr<function, array<vec2<f32>, 8>>) {
  var e = 0.0;
  if (li < nb) {
    e = exp(sc[off + li] - mx);
    *sum = ff_add1(*sum, e);
  }
  ew[li] = e;
  workgroupBarrier();
  add_values(j0, nb, kvo, li, acc);
  workgroupBarrier();
}

// Keys [first, pos]: their maximum score (returned) and, with weights exp(score - maximum), this
// invocation's share of their sum and its output dimensions' sums of weighted value rows.
fn attend(li: u32, first: u32, pos: u32, kvo: u32, teams: u32, sum: ptr<function, vec2<f32>>,
          acc: ptr<function, array<vec2<f32>, 8>>) -> f32 {
  var mx = -3.4e38;
  for (var j0 = first; j0 <= pos; j0 += 64u) {
    let nb = min(64u, pos + 1u - j0);
    let off = select(KEEP, j0 - first, j0 - first < KEEP);
    score_block(j0, nb, kvo, off, teams);
    if (li < nb) {
      mx = max(mx, sc[off + li]);
    }
  }
  mx = workgroup_max(mx, li);
  for (var j0 = first; j0 <= pos; j0 += 64u) {
    let nb = min(64u, pos + 1u - j0);
    var off = j0 - first;
    if (off >= KEEP) {
      off = KEEP;
      score_block(j0, nb, kvo, off, teams);
    }
    weigh_and_add(j0, nb, kvo, off, mx, li, sum, acc);
  }
  return mx;
}

// Phase 2: one workgroup per (head, token) over all the row's keys [first, pos].
fn single(t: u32, h: u32, li: u32, first: u32, pos: u32, qb: u32, kvo: u32, teams: u32) {
  var sum = vec2<f32>(0.0, 0.0);
  var acc: array<vec2<f32>, 8>;
  for (var k = 0u; k < 8u; k++) {
    acc[k] = vec2<f32>(0.0, 0.0);
  }
  attend(li, first, pos, kvo, teams, &sum, &acc);
  let tot = ff_workgroup_sum(sum, li);
  let total = tot.x + tot.y;
  for (var k = 0u; k < 8u; k++) {
    let d = li + 64u * k;
    if (d < p.hd) {
      o[qb + d] = (acc[k].x + acc[k].y) / total;
    }
  }
}

// q_norm: the query row in qs normalized and rotated in place, head_norm_wg.wgsl's operations
// (each invocation owns its pairs i, i + hd / 2).
fn norm_q(t: u32, li: u32) {
  var ss = vec2<f32>(0.0, 0.0);
  for (var i = li; i < p.hd; i += 64u) {
    ss = ff_add1(ss, qs[i] * qs[i]);
  }
  let tot = ff_workgroup_sum(ss, li);
  let inv = inverseSqrt(tot.x / f32(p.hd) + tot.y / f32(p.hd) + p.eps);
  let half = p.hd / 2u;
  for (var i = li; i < half; i += 64u) {
    var a = qs[i] * inv;
    var b = qs[i + half] * inv;
    if (p.has_w != 0u) {
      a = a * qw[i];
      b = b * qw[i + half];
    }
    let c = cs[p.cs_off + t * p.hd + i];
    let s = cs[p.cs_off + t * p.hd + half + i];
    let ra = a * c + (-b) * s;
    let rb = b * c + a * s;
    qs[i] = ra;
    qs[i + half] = rb;
  }
  workgroupBarrier();
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  // Phase 2: workgroups (heads, tokens); the split phases: (splits, heads, tokens).
  let single_pass = p.phase == 2u;
  let sp = select(wg.x, 0u, single_pass);
  let h = select(wg.y, wg.x, single_pass);
  let t = select(wg.z, wg.y, single_pass);
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
  let teams = team_begin(li);
  for (var i = li; i < p.hd; i += 64u) {
    qs[i] = q[qb + i];
  }
  workgroupBarrier();
  if (p.q_norm != 0u) {
    norm_q(t, li);
  }
  if (p.phase == 2u) {
    single(t, h, li, first, pos, qb, kvo, teams);
    return;
  }

  // Phase 1: the split's keys [lo, hi) (none: -3.4e38 and zero sums).
  var sum = vec2<f32>(0.0, 0.0);
  var acc: array<vec2<f32>, 8>;
  for (var k = 0u; k < 8u; k++) {
    acc[k] = vec2<f32>(0.0, 0.0);
  }
  var m = -3.4e38;
  if (lo < hi) {
    m = attend(li, lo, hi - 1u, kvo, teams, &sum, &acc);
  }
  if (li == 0u) {
    o[slot] = m;
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
