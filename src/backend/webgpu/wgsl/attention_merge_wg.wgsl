// The split attention's second dispatch (attention_wg.wgsl's phase 1 first): a workgroup per head,
// token and block of 64 output dimensions scales each split's float-float sums (the denominator
// and each of its dimensions' weighted values, with weights relative to the split's maximum) by
// exp(the split's maximum - the row's), adds them and divides, as attention_wg.wgsl's phase 2
// ends. One dimension per invocation, so a decode step's few heads spread over more workgroups and
// each invocation's chain of dependent additions is one pass over the splits.
struct P {
  n: u32, heads: u32, hd: u32, splits: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> part: array<f32>;
@group(0) @binding(2) var<storage, read_write> o: array<f32>;
@group(0) @binding(3) var<storage, read> mx: array<f32>;  // each (row, split)'s maximum score

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
  var m = -3.4e38;
  for (var s = 0u; s < p.splits; s++) {
    m = max(m, mx[row * p.splits + s]);
  }
  var tot = vec2<f32>(0.0, 0.0);
  var acc = vec2<f32>(0.0, 0.0);
  for (var s = 0u; s < p.splits; s++) {
    let b = base + s * stride;
    // (1 for the splits that hold the maximum; 0 for empty ones)
    let f = exp(mx[row * p.splits + s] - m);
    tot = ff_add(tot, vec2<f32>(part[b] * f, part[b + 1u] * f));
    acc = ff_add(acc, vec2<f32>(part[b + 2u + 2u * d] * f, part[b + 3u + 2u * d] * f));
  }
  let total = tot.x + tot.y;
  o[row * p.hd + d] = (acc.x + acc.y) / total;
}
