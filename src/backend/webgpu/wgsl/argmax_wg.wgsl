// argmax.wgsl with a workgroup per row (GPU adapters): each of 256 invocations scans a stride of
// the row, then a tree keeps the larger value, the lower id on ties (NaN never wins; a row with
// no number gives id 0, as the row kernel does).
struct P { rows: u32, vocab: u32, }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;

var<workgroup> bestv: array<f32, 256>;
var<workgroup> besti: array<u32, 256>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r = wg.x;
  if (r >= p.rows) {
    return;
  }
  let base = r * p.vocab;
  var bv = 0.0;
  var bi = 0xffffffffu;
  for (var i = li; i < p.vocab; i += 256u) {
    let v = z[base + i];
    if (bi == 0xffffffffu) {
      if (v == v) {
        bv = v;
        bi = i;
      }
    } else if (v > bv) {
      bv = v;
      bi = i;
    }
  }
  bestv[li] = bv;
  besti[li] = bi;
  workgroupBarrier();
  for (var s = 128u; s > 0u; s >>= 1u) {
    if (li < s) {
      let ov = bestv[li + s];
      let oi = besti[li + s];
      let mi = besti[li];
      if (oi != 0xffffffffu &&
          (mi == 0xffffffffu || ov > bestv[li] || (ov == bestv[li] && oi < mi))) {
        bestv[li] = ov;
        besti[li] = oi;
      }
    }
    workgroupBarrier();
  }
  if (li == 0u) {
    ids[r] = select(besti[0], 0u, besti[0] == 0xffffffffu);
  }
}
