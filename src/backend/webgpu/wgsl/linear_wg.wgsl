// linear.wgsl with a workgroup per block of 4 output rows and 4 tokens (GPU adapters): the 64
// invocations read the rows' u32 words in turn (coalesced; each word serves the 4 tokens), each
// keeping a partial sum per row and token (float-float for dense kinds and quantized ones without
// an SRQ input; exact i32 for SRQ inputs), added up after one barrier. The row and token loops
// have constant bounds (guarded inside) so that compilers unroll them and keep the partial sums
// in registers; SRQ inputs take a path of their own (below). The block's sums go through the
// family's reduction prelude (prelude_workgroup.wgsl: one barrier, then 16 invocations add 64
// partials each; prelude_subgroups.wgsl: subgroup sums).
// Workgroups: x + 16384 y = the row block, z = the token block.
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

const R: u32 = 4u;
const T: u32 = 4u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let o0 = (wg.y * 16384u + wg.x) * R;
  let t0 = wg.z * T;
  if (o0 >= p.rows || t0 >= p.n) {
    return;
  }
  let per = kind_per_word(p.kind);
  let quant = p.kind >= KIND_Q2;
  let srq = quant && p.srq_in != 0u;
  let nr = min(R, p.rows - o0);
  let nt = min(T, p.n - t0);
  var accf: array<array<vec2<f32>, 4>, 4>;  // [token][row]
  var acci: array<array<i32, 4>, 4>;
  for (var t = 0u; t < T; t++) {
    for (var r = 0u; r < R; r++) {
      accf[t][r] = vec2<f32>(0.0, 0.0);
      acci[t][r] = 0;
    }
  }
  if (srq) {
    // SRQ inputs (the QAT checkpoints' hot path): the 4 rows in the lanes of one i32 vector per
    // token, each kind's decode in a loop of its own with a constant trip count, and the tail
    // word's columns past `cols` masked (the rows' padding bytes are zero bytes, not zero codes).
    var acc4: array<vec4<i32>, 4>;  // [token], rows in lanes
    for (var t = 0u; t < T; t++) {
      acc4[t] = vec4<i32>(0);
    }
    for (var wi = li; wi < p.row_words; wi += 64u) {
      var wv4 = vec4<u32>(0u);
      for (var r = 0u; r < R; r++) {
        if (r < nr) {
          wv4[r] = w[(o0 + r) * p.row_words + wi];
        }
      }
      let i0 = wi * per;
      let m = min(per, p.cols - i0);
      let xb = p.x_off + t0 * p.x_stride + i0;
      if (p.kind == KIND_Q4) {
        for (var k = 0u; k < 8u; k++) {
          let c = select(vec4<i32>(0), vec4<i32>((wv4 >> vec4<u32>(4u * k)) & vec4<u32>(15u)) - vec4<i32>(8), k < m);
          for (var t = 0u; t < T; t++) {
            if (t < nt) {
              acc4[t] += c * i32(x[xb + t * p.x_stride + k]);
            }
          }
        }
      } else if (p.kind == KIND_Q2) {
        for (var k = 0u; k < 16u; k++) {
          let c = select(vec4<i32>(0), vec4<i32>((wv4 >> vec4<u32>(2u * k)) & vec4<u32>(3u)) - vec4<i32>(2), k < m);
          for (var t = 0u; t < T; t++) {
            if (t < nt) {
              acc4[t] += c * i32(x[xb + t * p.x_stride + k]);
            }
          }
        }
      } else {
        for (var k = 0u; k < 4u; k++) {
          let c = select(vec4<i32>(0), bitcast<vec4<i32>>(wv4 << vec4<u32>(24u - 8u * k)) >> vec4<u32>(24u), k < m);
          for (var t = 0u; t < T; t++) {
            if (t < nt) {
              acc4[t] += c * i32(x[xb + t * p.x_stride + k]);
            }
          }
        }
      }
    }
    for (var t = 0u; t < T; t++) {
      for (var r = 0u; r < R; r++) {
        acci[t][r] = acc4[t][r];
      }
    }
  }
  var wv: array<u32, 4>;
  for (var wi = li; wi < select(p.row_words, 0u, srq); wi += 64u) {
    let i0 = wi * per;
    let m = min(per, p.cols - i0);
    for (var r = 0u; r < R; r++) {
      if (r < nr) {
        wv[r] = w[(o0 + r) * p.row_words + wi];
      }
    }
    for (var t = 0u; t < T; t++) {
      if (t < nt) {
        let xb = p.x_off + (t0 + t) * p.x_stride + i0;
        for (var k = 0u; k < m; k++) {
          let xk = x[xb + k];
          for (var r = 0u; r < R; r++) {
            if (srq) {
              acci[t][r] += word_code(p.kind, wv[r], k) * i32(xk);
            } else if (quant) {
              accf[t][r] = ff_add1(accf[t][r], f32(word_code(p.kind, wv[r], k)) * xk);
            } else {
              accf[t][r] = ff_add1(accf[t][r], word_value(p.kind, wv[r], k) * xk);
            }
          }
        }
      }
    }
  }
  // The block's T x R sums (only its tokens'): the partials through workgroup memory
  // (lane_i / lane_ff, [token][row][invocation]), then invocation t R + r gets sum (t, r)
  // (prelude_workgroup.wgsl or prelude_subgroups.wgsl).
  let count = nt * R;
  var si = 0;
  var sf = vec2<f32>(0.0, 0.0);
  if (srq) {
    for (var t = 0u; t < T; t++) {
      for (var r = 0u; r < R; r++) {
        lane_i[(t * R + r) * 64u + li] = acci[t][r];
      }
    }
    si = i32_lane_sums(li, count);
  } else {
    for (var t = 0u; t < T; t++) {
      for (var r = 0u; r < R; r++) {
        lane_ff[(t * R + r) * 64u + li] = accf[t][r];
      }
    }
    sf = ff_lane_sums(li, count);
  }
  let r = li % R;
  if (li < count && r < nr) {
    let o = o0 + r;
    var out = 0.0;
    if (srq) {
      out = f32(si) * p.in_scale * scale[o];
    } else {
      out = sf.x + sf.y;
      if (quant) {
        out = out * scale[o];
      }
    }
    y[p.y_off + (t0 + li / R) * p.y_stride + o] = srq_out(out, p.out_scale);
  }
}
