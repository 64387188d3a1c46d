// One row per invocation: v = x * (mean(x^2) + eps)^-0.5 (* w when has_w). mode 0 writes y = v;
// mode 1 adds it to the residual, y = (y + v) * scale (the post-norms and the layer scalar);
// mode 2 does mode 1, then writes the next norm of the new row, z = y * (mean(y^2) + eps)^-0.5
// (* w2 when has_w2), to z rows of `width` (the same bits as a mode 0 dispatch on y). With
// x_in_y, x's rows are read from y's buffer (the residual stream's scratch region: one buffer
// may not be bound writable and read-only in one dispatch).
struct P {
  rows: u32, width: u32, x_off: u32, x_stride: u32,
  y_off: u32, y_stride: u32, has_w: u32, mode: u32,
  eps: f32, scale: f32, has_w2: u32, x_in_y: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> w2: array<f32>;
@group(0) @binding(5) var<storage, read_write> z: array<f32>;

fn xv(i: u32) -> f32 {
  if (p.x_in_y != 0u) {
    return y[i];
  }
  return x[i];
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let r = g.x;
  if (r >= p.rows) {
    return;
  }
  let xb = p.x_off + r * p.x_stride;
  let yb = p.y_off + r * p.y_stride;
  var ss = 0.0;
  for (var i = 0u; i < p.width; i++) {
    ss += xv(xb + i) * xv(xb + i);
  }
  let inv = inverseSqrt(ss / f32(p.width) + p.eps);
  for (var i = 0u; i < p.width; i++) {
    var v = xv(xb + i) * inv;
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
  var ss2 = 0.0;
  for (var i = 0u; i < p.width; i++) {
    ss2 += y[yb + i] * y[yb + i];
  }
  let inv2 = inverseSqrt(ss2 / f32(p.width) + p.eps);
  for (var i = 0u; i < p.width; i++) {
    var v = y[yb + i] * inv2;
    if (p.has_w2 != 0u) {
      v = v * w2[i];
    }
    z[r * p.width + i] = v;
  }
}
