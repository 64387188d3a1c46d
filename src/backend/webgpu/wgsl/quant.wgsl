// The SRQ input codes of a linear: clamp(round_half_even(x[t][c] / s), -128, 127), rows of
// `cols`: as exact small integers in f32 (the bits in y's words; linear_wg.wgsl reads them), or
// with `packed` four int8 codes to a word, columns 4 q .. 4 q + 3 in word q (padding columns 0),
// rows of ceil(cols / 4) words (linear_tile_wg.wgsl reads them as its packed inputs).
struct P { n: u32, cols: u32, x_off: u32, x_stride: u32, s: f32, packed: u32, }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let t = g.y;
  if (p.packed == 0u) {
    let c = g.x;
    if (c >= p.cols || t >= p.n) {
      return;
    }
    y[t * p.cols + c] = bitcast<u32>(srq_code(x[p.x_off + t * p.x_stride + c], p.s));
    return;
  }
  let words = (p.cols + 3u) / 4u;
  let q = g.x;
  if (q >= words || t >= p.n) {
    return;
  }
  var v = vec4<i32>(0);
  for (var b = 0u; b < 4u; b++) {
    let c = 4u * q + b;
    if (c < p.cols) {
      v[b] = i32(srq_code(x[p.x_off + t * p.x_stride + c], p.s));
    }
  }
  y[t * words + q] = pack4xI8(v);
}
