// argmax.wgsl for GPU adapters: each of 256 invocations scans a stride of its range, then a tree
// keeps the larger value, the lower id on ties (NaN never wins; a row with no number gives id 0,
// as the row kernel does). Three stages:
//   2: a workgroup per row, over the whole row -> ids;
//   0: `parts` workgroups per row (x: part, y: row), each over a contiguous slice of the row ->
//      its best (value, id) into pv, pi[row * parts + part] (id 0xffffffff: no number);
//   1: a workgroup per row over its parts, in the same way -> ids.
// Stages 0 and 1 give stage 2's id (a maximum, and the lowest id among equal maxima, is the same
// whichever way the row is cut); an E2B row of 262,144 logits is one workgroup's 1,024 loads per
// invocation in stage 2, four in stage 0.
struct P { rows: u32, vocab: u32, parts: u32, stage: u32, }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> pv: array<f32>;
@group(0) @binding(4) var<storage, read_write> pi: array<u32>;

var<workgroup> bestv: array<f32, 256>;
var<workgroup> besti: array<u32, 256>;

// (v, i) replaces the best (bv, bi) so far when it is a number and larger, or equal with a lower
// id; NaN and "no number" (i = 0xffffffff) never replace.
fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
  return i != 0xffffffffu && v == v && (bi == 0xffffffffu || v > bv || (v == bv && i < bi));
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r = select(wg.x, wg.y, p.stage == 0u);
  if (r >= p.rows || (p.stage == 0u && wg.x >= p.parts)) {
    return;
  }
  var bv = 0.0;
  var bi = 0xffffffffu;
  if (p.stage == 1u) {
    for (var k = li; k < p.parts; k += 256u) {
      let v = pv[r * p.parts + k];
      let i = pi[r * p.parts + k];
      if (better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
  } else {
    var lo = 0u;
    var hi = p.vocab;
    if (p.stage == 0u) {
      let chunk = (p.vocab + p.parts - 1u) / p.parts;
      lo = min(wg.x * chunk, p.vocab);
      hi = min(lo + chunk, p.vocab);
    }
    let base = r * p.vocab;
    for (var i = lo + li; i < hi; i += 256u) {
      let v = z[base + i];
      if (better(v, i, bv, bi)) {
        bv = v;
        bi = i;
      }
    }
  }
  bestv[li] = bv;
  besti[li] = bi;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) {
      if (better(bestv[li + s], besti[li + s], bestv[li], besti[li])) {
        bestv[li] = bestv[li + s];
        besti[li] = besti[li + s];
      }
    }
    workgroupBarrier();
  }
  if (li == 0u) {
    if (p.stage == 0u) {
      pv[r * p.parts + wg.x] = bestv[0];
      pi[r * p.parts + wg.x] = besti[0];
    } else {
      ids[r] = select(besti[0], 0u, besti[0] == 0xffffffffu);
    }
  }
}
