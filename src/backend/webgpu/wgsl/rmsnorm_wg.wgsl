// rmsnorm.wgsl with a workgroup per row (GPU adapters): the sum of squares in float-float across
// 64 invocations, each invocation then writes its own elements (mode 2: and reads them back for
// the next norm's sum, the same bits as a mode 0 dispatch on y).
struct P {
  rows: u32, width: u32, x_off: u32, x_stride: u32,
  y_off: u32, y_stride: u32, has_w: u32, mode: u32,
  eps: f32, scale: f32, has_w2: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> w2: array<f32>;
@group(0) @binding(5) var<storage, read_write> z: array<f32>;

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
    if (p.mode != 0u) {
      v = (y[yb + i] + v) * p.scale;
    }
    y[yb + i] = v;
  }
  if (p.mode != 2u) {
    return;
  }
  var ss2 = vec2<f32>(0.0, 0.0);
  for (var i = li; i < p.width; i += 64u) {
    let v = y[yb + i];
    ss2 = ff_add1(ss2, v * v);
  }
  let tot2 = ff_workgroup_sum(ss2, li);
  let inv2 = inverseSqrt(tot2.x / f32(p.width) + tot2.y / f32(p.width) + p.eps);
  for (var i = li; i < p.width; i += 64u) {
    var v = y[yb + i] * inv2;
    if (p.has_w2 != 0u) {
      v = v * w2[i];
    }
    z[r * p.width + i] = v;
  }
}
