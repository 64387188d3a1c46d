// The id of the largest logit of each output row (the lowest id on ties), one row per invocation.
struct P { rows: u32, vocab: u32, }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> z: array<f32>;
@group(0) @binding(2) var<storage, read_write> ids: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let r = g.x;
  if (r >= p.rows) {
    return;
  }
  let base = r * p.vocab;
  var best = 0u;
  var bv = z[base];
  for (var i = 1u; i < p.vocab; i++) {
    if (z[base + i] > bv) {
      bv = z[base + i];
      best = i;
    }
  }
  ids[r] = best;
}
