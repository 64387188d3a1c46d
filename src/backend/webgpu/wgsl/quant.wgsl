// The SRQ input codes of a linear: y[t][c] = clamp(round_half_even(x[t][c] / s), -128, 127), as
// exact small integers in f32, rows of `cols`.
struct P { n: u32, cols: u32, x_off: u32, x_stride: u32, s: f32, }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let c = g.x;
  let t = g.y;
  if (c >= p.cols || t >= p.n) {
    return;
  }
  y[t * p.cols + c] = srq_code(x[p.x_off + t * p.x_stride + c], p.s);
}
