// The last of the split attention's three dispatches (attention_wg.wgsl's phases 0 and 1 first): a
// workgroup per head, token and block of 64 output dimensions adds its splits' float-float sums
// (the denominator and each of its dimensions' weighted values) and divides, as attention_wg.wgsl's
// phase 2 ends. One dimension per invocation, so a decode step's few heads spread over more
// workgroups and each invocation's chain of dependent additions is one pass over the splits.
struct P {
  n: u32, heads: u32, hd: u32, splits: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let h = wg.x;
  let t = wg.y;
  let d = wg.z * 64u + li;
  if (h >= p.heads || t >= p.n || d >= p.hd) {
    return;
  }
  let row = t * p.heads + h;
  let stride = 2u + 2u * p.hd;
  let base = row * p.splits * stride;
  var tot = vec2<f32>(0.0, 0.0);
  var acc = vec2<f32>(0.0, 0.0);
  for (var s = 0u; s < p.splits; s++) {
    let b = base + s * stride;
    tot = ff_add(tot, vec2<f32>(part[b], part[b + 1u]));
    acc = ff_add(acc, vec2<f32>(part[b + 2u + 2u * d], part[b + 3u + 2u * d]));
  }
  let total = tot.x + tot.y;
  o[row * p.hd + d] = (acc.x + acc.y) / total;
}
