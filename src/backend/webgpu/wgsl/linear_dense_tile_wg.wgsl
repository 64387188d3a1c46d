// linear_wg.wgsl's float path for prompt chunks (GPU adapters): dense rows (f32, bf16, f16) and
// quantized rows without an SRQ input (codes times the row scale), such as the QAT checkpoint's
// bf16 per-layer model projection. A workgroup of 256 invocations per tile of 64 output rows x
// 64 tokens, so a chunk reads each weight once per 64 tokens (linear_wg: once per 4). Per step of
// 32 columns the weights and inputs are staged in workgroup memory as f32, column-major ([column]
// [4 rows or tokens] vectors), and each invocation keeps 4 rows x 4 tokens of sums: the products
// of a block of 8 columns added pairwise in f32, each block's sum added in float-float (the
// attention's score_part does the same). So an output is within a few ulp of the exact sum of
// the f32 products, as linear_wg's is, though not bit for bit linear_wg's. Columns past `cols`
// and rows or tokens past the ends count as zero.
// Workgroups: x = the row tile, y = the token tile.
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

const TILE: u32 = 64u;  // rows and tokens per tile
const K: u32 = 32u;     // columns per step
// [column][rows 4 q .. 4 q + 3] and [column][tokens 4 q ..]: 16 vectors per column, 16 KB in all.
var<workgroup> ws: array<vec4<f32>, 512>;
var<workgroup> xs: array<vec4<f32>, 512>;

// Word wi of row o, 0 past the row's end.
fn word(o: u32, wi: u32) -> u32 {
  return select(0u, w[o * p.row_words + wi], wi < p.row_words);
}

// The weight values of row o, columns c .. c + 7 (c a multiple of 8): the values for dense
// kinds, the integer codes for quantized ones; 0 past `cols` or the last row.
fn weights8(o: u32, c: u32) -> array<f32, 8> {
  var v: array<f32, 8>;
  for (var e = 0u; e < 8u; e++) {
    v[e] = 0.0;
  }
  if (o >= p.rows || c >= p.cols) {
    return v;
  }
  let per = kind_per_word(p.kind);
  let quant = p.kind >= KIND_Q2;
  for (var e = 0u; e < 8u; e++) {
    // (the last word's columns past `cols`: padding, not weights)
    if (c + e < p.cols) {
      let wd = word(o, (c + e) / per);
      let k = (c + e) % per;
      v[e] = select(word_value(p.kind, wd, k), f32(word_code(p.kind, wd, k)), quant);
    }
  }
  return v;
}

// hi + lo += b for four sums at once (float-float: TwoSum's error into lo).
fn ff4(hi: ptr<function, vec4<f32>>, lo: ptr<function, vec4<f32>>, b: vec4<f32>) {
  let s = *hi + b;
  let bb = s - *hi;
  *lo += (*hi - (s - bb)) + (b - bb);
  *hi = s;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let o0 = wg.x * TILE;
  let t0 = wg.y * TILE;
  // This invocation's outputs: rows o0 + 4 tr .. + 3, tokens t0 + 4 tt .. + 3.
  let tr = li % 16u;
  let tt = li / 16u;
  // What it stages per step: row (and token) lr, columns c0 + lk .. + 7.
  let lr = li / 4u;
  let lk = (li % 4u) * 8u;
  var hi: array<vec4<f32>, 4>;  // [token j], rows in lanes
  var lo: array<vec4<f32>, 4>;
  for (var j = 0u; j < 4u; j++) {
    hi[j] = vec4<f32>(0.0);
    lo[j] = vec4<f32>(0.0);
  }
  let xt = t0 + lr;
  let xb = p.x_off + xt * p.x_stride;
  for (var c0 = 0u; c0 < p.cols; c0 += K) {
    let wv = weights8(o0 + lr, c0 + lk);
    for (var e = 0u; e < 8u; e++) {
      let c = c0 + lk + e;
      var xv = 0.0;
      if (xt < p.n && c < p.cols) {
        xv = x[xb + c];
      }
      ws[(lk + e) * 16u + lr / 4u][lr % 4u] = wv[e];
      xs[(lk + e) * 16u + lr / 4u][lr % 4u] = xv;
    }
    workgroupBarrier();
    for (var kb = 0u; kb < K; kb += 8u) {
      var a: array<vec4<f32>, 8>;
      var b: array<vec4<f32>, 8>;
      for (var k = 0u; k < 8u; k++) {
        a[k] = ws[(kb + k) * 16u + tr];
        b[k] = xs[(kb + k) * 16u + tt];
      }
      for (var j = 0u; j < 4u; j++) {
        let s = ((a[0] * b[0][j] + a[1] * b[1][j]) + (a[2] * b[2][j] + a[3] * b[3][j])) +
                ((a[4] * b[4][j] + a[5] * b[5][j]) + (a[6] * b[6][j] + a[7] * b[7][j]));
        ff4(&hi[j], &lo[j], s);
      }
    }
    workgroupBarrier();
  }
  let quant = p.kind >= KIND_Q2;
  for (var j = 0u; j < 4u; j++) {
    let t = t0 + 4u * tt + j;
    if (t < p.n) {
      let sum = hi[j] + lo[j];
      for (var i = 0u; i < 4u; i++) {
        let o = o0 + 4u * tr + i;
        if (o < p.rows) {
          var out = sum[i];
          if (quant) {
            out = out * scale[o];
          }
          y[p.y_off + t * p.y_stride + o] = srq_out(out, p.out_scale);
        }
      }
    }
  }
}
