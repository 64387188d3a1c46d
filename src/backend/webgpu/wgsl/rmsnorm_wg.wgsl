// rmsnorm.wgsl with a workgroup per row (GPU adapters): the sum of squares in float-float across
// 64 invocations, each invocation then writes its own elements (mode 2: and keeps them for the
// next norm's sum, the same bits as a mode 0 dispatch on y). Each invocation takes its elements
// four at a time (i, i + 64, i + 128, i + 192 of every 256), their loads issued together: a
// decode step's norms are one workgroup each, so their time is the chain of dependent loads, which
// this cuts to a quarter. The four partial sums are added in float-float, whose ~44 bits make the
// order they are added in immaterial to the f32 result in all but rare ties. With x_in_y, x's rows
// are read from y's buffer (as in rmsnorm.wgsl).
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

// Elements i + 64 k (k < 4) of the row at base b of x (of y with from_y), zero past the width.
fn load4(from_y: bool, b: u32, i: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  for (var k = 0u; k < 4u; k++) {
    if (i + 64u * k < p.width) {
      if (from_y || p.x_in_y != 0u) {
        v[k] = y[b + i + 64u * k];
      } else {
        v[k] = x[b + i + 64u * k];
      }
    }
  }
  return v;
}

fn sum_squares(ss: vec4<f32>, sl: vec4<f32>) -> vec2<f32> {
  return ff_add(ff_add(vec2<f32>(ss.x, sl.x), vec2<f32>(ss.y, sl.y)),
                ff_add(vec2<f32>(ss.z, sl.z), vec2<f32>(ss.w, sl.w)));
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let r = wg.x;
  if (r >= p.rows) {
    return;
  }
  let xb = p.x_off + r * p.x_stride;
  let yb = p.y_off + r * p.y_stride;
  // Four float-float partials (hi in ss, lo in sl), one per element of a group of four.
  var ss = vec4<f32>(0.0);
  var sl = vec4<f32>(0.0);
  for (var i = li; i < p.width; i += 256u) {
    let v = load4(false, xb, i);
    for (var k = 0u; k < 4u; k++) {
      let f = ff_add1(vec2<f32>(ss[k], sl[k]), v[k] * v[k]);
      ss[k] = f.x;
      sl[k] = f.y;
    }
  }
  let tot = ff_workgroup_sum(sum_squares(ss, sl), li);
  let inv = inverseSqrt(tot.x / f32(p.width) + tot.y / f32(p.width) + p.eps);
  ss = vec4<f32>(0.0);
  sl = vec4<f32>(0.0);
  for (var i = li; i < p.width; i += 256u) {
    var v = load4(false, xb, i) * inv;
    for (var k = 0u; k < 4u; k++) {
      if (p.has_w != 0u && i + 64u * k < p.width) {
        v[k] = v[k] * w[i + 64u * k];
      }
    }
    if (p.mode != 0u) {
      v = (load4(true, yb, i) + v) * p.scale;
    }
    for (var k = 0u; k < 4u; k++) {
      if (i + 64u * k < p.width) {
        y[yb + i + 64u * k] = v[k];
        // Mode 2: the new row's sum of squares, from the values just written.
        let f = ff_add1(vec2<f32>(ss[k], sl[k]), v[k] * v[k]);
        ss[k] = f.x;
        sl[k] = f.y;
      }
    }
  }
  if (p.mode != 2u) {
    return;
  }
  let tot2 = ff_workgroup_sum(sum_squares(ss, sl), li);
  let inv2 = inverseSqrt(tot2.x / f32(p.width) + tot2.y / f32(p.width) + p.eps);
  for (var i = li; i < p.width; i += 256u) {
    var v = load4(true, yb, i) * inv2;
    for (var k = 0u; k < 4u; k++) {
      if (i + 64u * k < p.width) {
        var u = v[k];
        if (p.has_w2 != 0u) {
          u = u * w2[i + 64u * k];
        }
        z[r * p.width + i + 64u * k] = u;
      }
    }
  }
}
