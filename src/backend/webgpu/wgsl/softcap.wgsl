// The final logit softcap in place: z = cap * tanh(z / cap).
struct P { count: u32, cap: f32, }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> z: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = g.y * 65535u * 64u + g.x;
  if (i >= p.count) {
    return;
  }
  z[i] = tanh_f(z[i] / p.cap) * p.cap;
}
