// y[t][o] = srq_out(sum_i W[o][i] x[t][i]) for one output row o and token t per invocation:
// dense kinds sum in f32; quantized kinds with an SRQ input read x as codes (quant.wgsl) and sum
// the integer products exactly, then scale; quantized kinds without one sum code * x in f32.
struct P {
  rows: u32, cols: u32, row_words: u32, kind: u32,
  n: u32, x_off: u32, x_stride: u32, y_off: u32,
  y_stride: u32, srq_in: u32, in_scale: f32, out_scale: f32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

fn code_at(base: u32, i: u32) -> i32 {
  if (p.kind == KIND_Q8) {
    return bitcast<i32>(w[base + (i >> 2u)] << (24u - 8u * (i & 3u))) >> 24u;
  }
  if (p.kind == KIND_Q4) {
    return i32((w[base + (i >> 3u)] >> (4u * (i & 7u))) & 15u) - 8;
  }
  return i32((w[base + (i >> 4u)] >> (2u * (i & 15u))) & 3u) - 2;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let o = g.x;
  let t = g.y;
  if (o >= p.rows || t >= p.n) {
    return;
  }
  let base = o * p.row_words;
  let xb = p.x_off + t * p.x_stride;
  var out = 0.0;
  if (p.kind == KIND_F32) {
    for (var i = 0u; i < p.cols; i++) {
      out += bitcast<f32>(w[base + i]) * x[xb + i];
    }
  } else if (p.kind == KIND_BF16) {
    for (var i = 0u; i + 1u < p.cols; i += 2u) {
      let word = w[base + (i >> 1u)];
      out += bitcast<f32>(word << 16u) * x[xb + i];
      out += bitcast<f32>(word & 0xffff0000u) * x[xb + i + 1u];
    }
    if ((p.cols & 1u) != 0u) {
      out += bitcast<f32>(w[base + (p.cols >> 1u)] << 16u) * x[xb + p.cols - 1u];
    }
  } else if (p.kind == KIND_F16) {
    for (var i = 0u; i < p.cols; i++) {
      out += unpack2x16float(w[base + (i >> 1u)])[i & 1u] * x[xb + i];
    }
  } else if (p.srq_in != 0u) {
    var acc = 0;
    for (var i = 0u; i < p.cols; i++) {
      acc += code_at(base, i) * i32(x[xb + i]);
    }
    out = f32(acc) * p.in_scale * scale[o];
  } else {
    for (var i = 0u; i < p.cols; i++) {
      out += f32(code_at(base, i)) * x[xb + i];
    }
    out = out * scale[o];
  }
  y[p.y_off + t * p.y_stride + o] = srq_out(out, p.out_scale);
}
