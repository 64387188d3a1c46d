// rmsnorm.wgsl with a workgroup per row (GPU adapters): the sum of squares in float-float across
// 64 invocations, each invocation then writes its own elements.
struct P {
  rows: u32, width: u32, x_off: u32, x_stride: u32,
  y_off: u32, y_stride: u32, has_w: u32, mode: u32,
  eps: f32, scale: f32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r = wg.x;
  if (r >= p.rows) {
    return;
  }
  let xb = p.x_off + r * p.x_stride;
  let yb = p.y_off + r * p.y_stride;
  var ss = vec2<f32>(0.0, 0.0);
  for (var i = li; i < p.width; i += 64u) {
    let v = x[xb + i];
    ss = ff_add1(ss, v * v);
  }
  let tot = ff_workgroup_sum(ss, li);
  let inv = inverseSqrt(tot.x / f32(p.width) + tot.y / f32(p.width) + p.eps);
  for (var i = li; i < p.width; i += 64u) {
    var v = x[xb + i] * inv;
    if (p.has_w != 0u) {
      v = v * w[i];
    }
    if (p.mode == 1u) {
      v = (y[yb + i] + v) * p.scale;
    }
    y[yb + i] = v;
  }
}
