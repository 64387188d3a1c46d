// a[t][i] = gelu_tanh(a[t][i]) * b[t][b_off + i] for i < width: the MLP's gate times up, and the
// per-layer input gate times the token's per-layer input.
struct P { n: u32, width: u32, b_off: u32, b_stride: u32, }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> a: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = g.x;
  let t = g.y;
  if (i >= p.width || t >= p.n) {
    return;
  }
  let k = t * p.width + i;
  a[k] = gelu_tanh(a[k]) * b[p.b_off + t * p.b_stride + i];
}
