// The SRQ linears of decode steps and short chunks (1 to 4 tokens; GPU adapters whose WGSL has
// packed_4x8_integer_dot_product): one dispatch instead of quant.wgsl + linear_wg.wgsl. Every
// workgroup of 256 invocations quantizes the input itself (srq_code, as quant.wgsl) into
// workgroup memory, four int8 codes to a u32 in the order the weight words unpack to, then
// `lanes` invocations share each of its 256 / lanes rows, each loading 16-byte vectors of four
// weight words where a row is whole vectors (row_words % 4 == 0), else single words (the
// buffers are bound as vec4<u32>, padded to 16 bytes):
// - int8 rows: a weight word is four signed codes, multiplied with dot4I8Packed as stored;
// - int4 rows: (word >> 4k) & 0x0f0f0f0f, k = 0, 1, holds codes k, k + 2, k + 4, k + 6 as bytes;
// - int2 rows: (word >> 2k) & 0x03030303, k = 0 .. 3, holds codes k, k + 4, k + 8, k + 12;
// the input words are packed in those orders. The 2- and 4-bit codes are offset binary (value =
// code - 2, code - 8): the sum of code x input over a row, less 2 (8) times the sum of the
// token's input codes (the same for every row; padding columns have input code 0), is the row's
// exact dot product. All sums are exact i32, so every output is bit for bit linear_wg's:
// f32(sum) * in_scale * row scale, then the SRQ output rounding when out_scale > 0.
// Epilogues (epi): 0 y = the output; 1 aux = gelu_tanh(aux) * output (the MLP's up projection
// after the gate wrote aux: gelu_mul.wgsl's product, one dispatch fewer); 2 y = gelu_tanh(output)
// * aux (the per-layer input gate times the token's per-layer input); aux rows at aux_off with
// stride aux_stride; 3 (paired) a second linear of the same shape and kind (w2, scale2, in_scale2,
// out_scale2: the MLP's up projection beside its gate) runs on the same rows and y =
// gelu_tanh(output) * its output (gate and up in one dispatch: epilogue 1's operations, so its
// bits). The same f32 operations as gelu_mul.wgsl, so the same bits. The second linear's input is
// quantized with its own scale (after the first's in xs) unless the two scales are equal. 4
// (stacked) a second linear of the same shape and kind (w2, scale2, in_scale2, out_scale2: a
// layer's v beside its k) as rows rows .. 2 rows - 1 of the dispatch, on its own input set, its
// output at aux_off with y's stride: two linears of one input in one dispatch.
// Needs sets x n x row_words x (input words per weight word: 4 int2, 2 int4, 1 int8) <= XS = 3,072
// (webgpu_backend.cc checks; sets: 2 where paired or stacked with another input scale, else 1).
// Workgroup x + 16384 y takes blocks of rows x + 16384 y, then that plus the grid's size, and so
// on (the library's webgpu.matvecWorkgroups caps the grid: each workgroup quantizes the input once
// for all of its blocks).
// The residual norm in the prologue (pro, as the native backend's PRO): 1 the input is the new
// residual row r = (r_in + norm(t) x wa) x pro_scale, 2 it is norm(r) x wb; r_in, t and r_out are
// rows (stride x_stride) of x, the residual stream (two residual regions and the scratch the
// previous linear wrote t to), wa and wb offsets into vecs (the norm weights, flags bits 0 and 1:
// present), eps the norms' epsilon. Every workgroup computes the rows' norms itself, in
// rmsnorm_wg.wgsl's order (pro_sum: the same float-float partials, added in the same order), so
// the inputs are the bits of an rmsnorm_wg dispatch (mode 1, or 2 for its z) followed by
// this kernel without a prologue; with flags bit 2 the workgroups write r to r_out, a slice each
// (the stream double-buffered: they all still read r_in), with bit 3 the input to z_off (another
// region of the stream: the input of the linears that follow on the same one). One dispatch
// instead of two for each of a decode layer's residual norms.
// The hand-off to the next linear (pack, epilogue 3 only: the MLP's down projection): the pair's
// outputs also go out as that linear's input codes (srq_code with its input scale pack_scale),
// packed as its prologue packs them (pack: its kind), pack_xw words a token, into aux; where
// rows per workgroup are a multiple of that kind's column group (16 int2, 8 int4, 4 int8), so a
// block's rows are whole words. That linear then takes them as they are (x_packed: x holds the
// words, no quantization in its prologue; the same codes, so the same bits) instead of each of
// its workgroups quantizing its 6,144-12,288 inputs.
struct P {
  rows: u32, cols: u32, row_words: u32, kind: u32,
  n: u32, x_off: u32, x_stride: u32, y_off: u32,
  y_stride: u32, srq_in: u32, in_scale: f32, out_scale: f32,
  lanes: u32,  // invocations per row: 8, 16, 32 or 64
  epi: u32, aux_off: u32, aux_stride: u32,
  in_scale2: f32, out_scale2: f32,  // epi 3 and 4: the second linear's SRQ scales
  pro: u32, r_in: u32, r_out: u32, t_off: u32,
  wa: u32, wb: u32, pro_flags: u32, pro_scale: f32,
  eps: f32, pack: u32, pack_scale: f32, pack_xw: u32,
  x_packed: u32, z_off: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
// x and aux hold f32 bits, or packed input codes (x_packed, pack): read and written by bitcast
@group(0) @binding(3) var<storage, read_write> x: array<u32>;  // (written by pro's r_out only)
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> aux: array<u32>;
@group(0) @binding(6) var<storage, read> w2: array<vec4<u32>>;  // epi 3 (else any weights)
@group(0) @binding(7) var<storage, read> scale2: array<f32>;  // epi 3 (else any scales)
@group(0) @binding(8) var<storage, read> vecs: array<f32>;  // pro's norm weights (else any)

const WG: u32 = 256u;
const XS: u32 = 3072u;
// [token][input word], four words to an element: an int2 weight word's four input words are one
// 16-byte load (consecutive invocations, consecutive elements: no bank conflicts), an int4 word's
// two half of one (two invocations share it)
var<workgroup> xs: array<vec4<u32>, XS / 4u>;
var<workgroup> part: array<i32, WG>;   // one token's partial sums, [row][lane]
var<workgroup> part2: array<i32, WG>;  // the second linear's (epi 3)
var<workgroup> xsum: array<atomic<i32>, 8>;  // each token's sum of input codes [set][token]
var<workgroup> pcode: array<i32, 64>;  // pack: a block's output codes (rows per workgroup <= 64)

// The new residual's element col of the row at b (pro): (r_in + t x it x wa) x pro_scale, in
// rmsnorm_wg.wgsl's order of operations (mode 1).
fn res_value(b: u32, col: u32, it: f32) -> f32 {
  var v = bitcast<f32>(x[p.t_off + b + col]) * it;
  if ((p.pro_flags & 1u) != 0u) {
    v = v * vecs[p.wa + col];
  }
  return (bitcast<f32>(x[p.r_in + b + col]) + v) * p.pro_scale;
}

// Token t's input element col: x's, or pro's (it, ir: the token's two inverse norms).
fn input(t: u32, col: u32, it: f32, ir: f32) -> f32 {
  if (p.pro == 0u) {
    return bitcast<f32>(x[p.x_off + t * p.x_stride + col]);
  }
  let r = res_value(t * p.x_stride, col, it);
  if (p.pro == 1u) {
    return r;
  }
  var u = r * ir;
  if ((p.pro_flags & 2u) != 0u) {
    u = u * vecs[p.wb + col];
  }
  return u;
}

// The sum of squares of the row at b of t (or, with second, of the new residual, t's inverse norm
// it), as rmsnorm_wg.wgsl adds it: its invocation i < 64 keeps four float-float partials, k < 4,
// of elements i + 64 k + 256 j in turn (j = 0, 1, ...), adds them (0 + 1) + (2 + 3), then sums
// the 64 with ff_workgroup_sum. Here invocation i + 64 k adds partial k itself (the same elements
// in the same order; rmsnorm_wg's zeros past the width change no float-float sum), eight loads
// issued together, so a 1,536-wide row is one round of loads rather than six. Uses part and part2
// (free before the products); every invocation calls it and gets the sum.
fn pro_sum(li: u32, b: u32, it: f32, second: bool) -> vec2<f32> {
  var a = vec2<f32>(0.0);
  for (var i0 = li; i0 < p.cols; i0 += 8u * WG) {
    var v = array<f32, 8>();
    for (var j = 0u; j < 8u; j++) {
      let i = i0 + j * WG;
      if (i < p.cols) {
        if (second) {
          v[j] = res_value(b, i, it);
        } else {
          v[j] = bitcast<f32>(x[p.t_off + b + i]);
        }
      }
    }
    for (var j = 0u; j < 8u; j++) {
      if (i0 + j * WG < p.cols) {
        a = ff_add1(a, v[j] * v[j]);
      }
    }
  }
  part[li] = bitcast<i32>(a.x);
  part2[li] = bitcast<i32>(a.y);
  workgroupBarrier();
  var s = vec2<f32>(0.0);
  if (li < 64u) {
    var k4: array<vec2<f32>, 4>;
    for (var k = 0u; k < 4u; k++) {
      k4[k] = vec2<f32>(bitcast<f32>(part[li + 64u * k]), bitcast<f32>(part2[li + 64u * k]));
    }
    s = ff_add(ff_add(k4[0], k4[1]), ff_add(k4[2], k4[3]));
  }
  return ff_workgroup_sum(s, li);
}

fn inv_rms(tot: vec2<f32>) -> f32 {
  return inverseSqrt(tot.x / f32(p.cols) + tot.y / f32(p.cols) + p.eps);
}

// Input words per weight word.
fn group() -> u32 {
  return select(select(1u, 2u, p.kind == KIND_Q4), 4u, p.kind == KIND_Q2);
}

// Column of byte b of input word q (within a token) of a linear of this kind.
fn column_of(kind: u32, q: u32, b: u32) -> u32 {
  if (kind == KIND_Q2) {
    return 16u * (q / 4u) + 4u * b + q % 4u;
  }
  if (kind == KIND_Q4) {
    return 8u * (q / 2u) + 2u * b + q % 2u;
  }
  return 4u * q + b;
}

fn column(q: u32, b: u32) -> u32 {
  return column_of(p.kind, q, b);
}

// Row word j's products with the input words of a token that start at input word q0.
fn dot_word(word: u32, q0: u32, j: u32) -> i32 {
  // (q0 is a multiple of 4 for int2 and of 2 for int4, so an int2 word's four input words are one
  // element and an int4 word's two sit in one)
  if (p.kind == KIND_Q2) {
    let xv = xs[q0 / 4u + j];
    var a = 0;
    for (var k = 0u; k < 4u; k++) {
      a += dot4I8Packed((word >> (2u * k)) & 0x03030303u, xv[k]);
    }
    return a;
  }
  if (p.kind == KIND_Q4) {
    let q = q0 + 2u * j;
    let xv = xs[q / 4u];
    let h = q % 4u;
    return dot4I8Packed(word & 0x0f0f0f0fu, xv[h]) + dot4I8Packed((word >> 4u) & 0x0f0f0f0fu, xv[h + 1u]);
  }
  let q = q0 + j;
  return dot4I8Packed(word, xs[q / 4u][q % 4u]);
}

// Row word j (of row words from input word 0) of the first linear and, paired, the second, into
// each token's sums.
// (q1: the first sums' input set, 0 or, for a stacked linear's second rows, q2)
fn add_word(acc: ptr<function, array<i32, 4>>, acc2: ptr<function, array<i32, 4>>, word: u32,
            word2: u32, j: u32, xw: u32, q1: u32, q2: u32) {
  for (var t = 0u; t < 4u; t++) {
    if (t < p.n) {
      (*acc)[t] += dot_word(word, q1 + t * xw, j);
      if (p.epi == 3u) {
        (*acc2)[t] += dot_word(word2, q2 + t * xw, j);
      }
    }
  }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
  let rpw = WG / p.lanes;
  let first = wg.y * 16384u + wg.x;
  let paired = p.epi == 3u;
  let stacked = p.epi == 4u;
  let total = select(p.rows, 2u * p.rows, stacked);  // rows of the dispatch
  if (first * rpw >= total) {
    return;
  }
  let g = group();
  let xw = p.row_words * g;  // input words per token
  // Input sets: the first linear's, then the second's where its scale differs.
  let sets = select(1u, 2u, (paired || stacked) && p.in_scale2 != p.in_scale);
  let r = li / p.lanes;
  let lane = li % p.lanes;
  let n4 = select(0u, p.row_words / 4u, p.row_words % 4u == 0u);  // vectors per row (whole ones)
  // pro: each token's inverse norms, of t (it) and of the new residual (ir).
  var it = vec4<f32>(0.0);
  var ir = vec4<f32>(0.0);
  if (p.pro != 0u) {
    for (var t = 0u; t < p.n; t++) {
      let b = t * p.x_stride;
      it[t] = inv_rms(pro_sum(li, b, 0.0, false));
      if (p.pro == 2u) {
        ir[t] = inv_rms(pro_sum(li, b, it[t], true));
      }
    }
    if ((p.pro_flags & 12u) != 0u) {
      // The new residual (flag 4) and the input (flag 8: for the next linears of the same
      // input, k and v after q), a slice per workgroup.
      for (var q = first * WG + li; q < p.n * p.cols; q += nwg.x * nwg.y * WG) {
        let t = q / p.cols;
        let col = q - t * p.cols;
        if ((p.pro_flags & 4u) != 0u) {
          x[p.r_out + t * p.x_stride + col] = bitcast<u32>(res_value(t * p.x_stride, col, it[t]));
        }
        if ((p.pro_flags & 8u) != 0u) {
          x[p.z_off + t * p.x_stride + col] = bitcast<u32>(input(t, col, it[t], ir[t]));
        }
      }
    }
  }
  if (li < 8u) {
    atomicStore(&xsum[li], 0);
  }
  workgroupBarrier();
  var s = array<i32, 8>(0, 0, 0, 0, 0, 0, 0, 0);
  for (var q = li; q < sets * p.n * xw; q += WG) {
    let st = q / (p.n * xw);  // (set, token) = (st, t)
    let qt = q - st * p.n * xw;
    let t = qt / xw;
    let qi = qt - t * xw;
    let sc = select(p.in_scale, p.in_scale2, st == 1u);
    var word = 0u;
    var sum = 0;
    if (p.x_packed != 0u) {
      word = x[p.x_off + t * p.x_stride + qi];
      sum = dot4I8Packed(word, 0x01010101u);  // (its four codes' sum)
    } else {
      var c = vec4<i32>(0);
      for (var b = 0u; b < 4u; b++) {
        let col = column(qi, b);
        if (col < p.cols) {
          c[b] = i32(srq_code(input(t, col, it[t], ir[t]), sc));
        }
      }
      word = pack4xI8(c);
      sum = c.x + c.y + c.z + c.w;
    }
    xs[q / 4u][q % 4u] = word;
    for (var u = 0u; u < 8u; u++) {
      if (u == st * 4u + t) {
        s[u] += sum;
      }
    }
  }
  for (var u = 0u; u < 8u; u++) {
    if (s[u] != 0) {
      atomicAdd(&xsum[u], s[u]);
    }
  }
  workgroupBarrier();
  let offset = select(select(0, 8, p.kind == KIND_Q4), 2, p.kind == KIND_Q2);
  var corr = array<i32, 4>(0, 0, 0, 0);
  var corr2 = array<i32, 4>(0, 0, 0, 0);
  let set2 = (sets - 1u) * 4u;  // the second linear's (set, token 0) index into xsum
  for (var t = 0u; t < 4u; t++) {
    if (t < p.n) {
      corr[t] = offset * atomicLoad(&xsum[t]);
      corr2[t] = offset * atomicLoad(&xsum[set2 + t]);
    }
  }
  let q2 = (sets - 1u) * p.n * xw;  // the second linear's first input word

  let grid = nwg.x * nwg.y;
  // (uniform: every invocation of the workgroup runs the same blocks)
  for (var blk = first; blk * rpw < total; blk += grid) {
    let o0 = blk * rpw;
    let o = o0 + r;
    // (stacked: rows past the first linear's are the second's, from w2 on its input set)
    let sec = stacked && o >= p.rows;
    let q1 = select(0u, q2, sec);
    var acc = array<i32, 4>(0, 0, 0, 0);
    var acc2 = array<i32, 4>(0, 0, 0, 0);
    if (o < total) {
      let rb = select(o, o - p.rows, sec) * p.row_words;
      if (n4 > 0u) {
        // Whole vectors: one 16-byte load per four words (the loads the decode step's speed
        // rests on: 2-3x single words on an H100, bench/web/wgsl_kernel_bench.mjs). (Loading the
        // first block's vectors before the prologue, into registers, measured slower: q 11.5
        // against 10.2 us, gate/up 21.3 against 13.8, bench/journal/2026-12-06-webgpu-prologue.md.)
        for (var j4 = lane; j4 < n4; j4 += p.lanes) {
          var wv: vec4<u32>;
          if (sec) {
            wv = w2[rb / 4u + j4];
          } else {
            wv = w[rb / 4u + j4];
          }
          var wv2 = vec4<u32>(0u);
          if (paired) {
            wv2 = w2[rb / 4u + j4];
          }
          for (var c = 0u; c < 4u; c++) {
            add_word(&acc, &acc2, wv[c], wv2[c], 4u * j4 + c, xw, q1, q2);
          }
        }
      } else {
        for (var j = lane; j < p.row_words; j += p.lanes) {
          let i = rb + j;
          var word2 = 0u;
          if (paired) {
            word2 = w2[i / 4u][i % 4u];
          }
          var word: u32;
          if (sec) {
            word = w2[i / 4u][i % 4u];
          } else {
            word = w[i / 4u][i % 4u];
          }
          add_word(&acc, &acc2, word, word2, j, xw, q1, q2);
        }
      }
    }
    // Token by token, invocation r of the block adds row r's partials.
    for (var t = 0u; t < p.n; t++) {
      part[li] = acc[t];
      part2[li] = acc2[t];
      workgroupBarrier();
      let oo = o0 + li;
      if (li < rpw) {
        pcode[li] = 0;  // (rows past the end: code 0, as the consumer's padding columns)
      }
      if (stacked && li < rpw && oo >= p.rows && oo < total) {
        // The second linear's row: its scales, its input set's offset, its output at aux_off.
        let os = oo - p.rows;
        var sum = 0;
        for (var l = 0u; l < p.lanes; l++) {
          sum += part[li * p.lanes + l];
        }
        sum -= corr2[t];
        y[p.aux_off + t * p.y_stride + os] =
            srq_out(f32(sum) * p.in_scale2 * scale2[os], p.out_scale2);
      } else if (li < rpw && oo < p.rows) {
        var sum = 0;
        for (var l = 0u; l < p.lanes; l++) {
          sum += part[li * p.lanes + l];
        }
        sum -= corr[t];
        let v = srq_out(f32(sum) * p.in_scale * scale[oo], p.out_scale);
        let k = p.aux_off + t * p.aux_stride + oo;
        if (paired) {
          var sum2 = 0;
          for (var l = 0u; l < p.lanes; l++) {
            sum2 += part2[li * p.lanes + l];
          }
          sum2 -= corr2[t];
          let v2 = srq_out(f32(sum2) * p.in_scale2 * scale2[oo], p.out_scale2);
          let g = gelu_tanh(v) * v2;
          y[p.y_off + t * p.y_stride + oo] = g;
          if (p.pack != 0u) {
            pcode[li] = i32(srq_code(g, p.pack_scale));
          }
        } else if (p.epi == 1u) {
          aux[k] = bitcast<u32>(gelu_tanh(bitcast<f32>(aux[k])) * v);
        } else if (p.epi == 2u) {
          y[p.y_off + t * p.y_stride + oo] = gelu_tanh(v) * bitcast<f32>(aux[k]);
        } else {
          y[p.y_off + t * p.y_stride + oo] = v;
        }
      }
      workgroupBarrier();  // (part is rewritten next)
      let q = o0 / 4u + li;
      if (p.pack != 0u && li < rpw / 4u && q < p.pack_xw) {
        // The block's words of the consumer's input: word o0 / 4 + li's four codes (the last
        // block's past the row's words belong to no token).
        var c = vec4<i32>(0);
        for (var b = 0u; b < 4u; b++) {
          c[b] = pcode[column_of(p.pack, q, b) - o0];
        }
        aux[t * p.pack_xw + q] = pack4xI8(c);
      }
    }
  }
}
