// linear_wg.wgsl's SRQ path for prompt chunks (GPU adapters): a workgroup of 256 invocations per
// tile of 64 output rows x 64 tokens, so a chunk reads each weight word once per 64 tokens instead
// of once per 4. Per step of 64 columns the weight codes (int2 / int4 / int8) are packed four int8
// to a u32 in workgroup memory beside the input codes (packed so by quant.wgsl: x_off and
// x_stride count words, four columns to a word, 0 past `cols`), and
// each invocation keeps 4 rows x 4 tokens of exact i32 sums with dot4I8Packed. The sums are exact,
// so every output is bit for bit linear_wg's: f32(sum) * in_scale * row scale, then the SRQ output
// rounding when out_scale > 0. Columns past `cols` and rows or tokens past the ends count as zero.
// Workgroups: x = the row tile, y = the token tile, z = the split.
// Split over the columns (splits > 1: linears with few tiles, whose workgroups would otherwise
// leave the GPU idle): workgroup z takes steps z kper .. of 64 columns and stores its raw i32
// sums into part[(z n + token) rows + row]; then a second dispatch (phase 1, a workgroup per 256
// rows and a token) adds each output's splits in order and applies the epilogue. The sums are
// exact, so the outputs are the unsplit kernel's bits.
struct P {
  rows: u32, cols: u32, row_words: u32, kind: u32,
  n: u32, x_off: u32, x_stride: u32, y_off: u32,
  y_stride: u32, srq_in: u32, in_scale: f32, out_scale: f32,
  splits: u32, kper: u32, phase: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> w: array<u32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> x: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> part: array<i32>;

const TILE: u32 = 64u;  // rows and tokens per tile, columns per step
const KW: u32 = 16u;    // packed words per row (or token) per step
// [word k][rows 4 q .. 4 q + 3] and [word k][tokens 4 q ..]: an invocation's 4 rows (tokens) of a
// word in one vector.
var<workgroup> ws: array<vec4<u32>, 256>;
var<workgroup> xs: array<vec4<u32>, 256>;

// The source words of row o's weight codes for columns c .. c + 15 (c a multiple of 16): one word
// per 16 int2 codes, two per 16 int4 codes, four per 16 int8 codes (0 past the row).
fn weight_words(o: u32, c: u32) -> vec4<u32> {
  var out = vec4<u32>(0u);
  if (o >= p.rows || c >= p.cols) {
    return out;
  }
  let rb = o * p.row_words;
  let per = select(select(4u, 2u, p.kind == KIND_Q4), 1u, p.kind == KIND_Q2);
  let w0 = c / (16u / per);
  for (var q = 0u; q < 4u; q++) {
    if (q < per && w0 + q < p.row_words) {
      out[q] = w[rb + w0 + q];
    }
  }
  return out;
}

// Those words' codes as 4 packed int8 words (columns past `cols`: 0).
fn weight_codes(src: vec4<u32>, c: u32) -> vec4<u32> {
  var out = vec4<u32>(0u);
  let lane = vec4<u32>(0u, 1u, 2u, 3u);
  for (var q = 0u; q < 4u; q++) {
    let col = vec4<u32>(c + 4u * q) + lane;
    var v: vec4<i32>;
    if (p.kind == KIND_Q4) {
      v = vec4<i32>((vec4<u32>(src[q / 2u]) >> (4u * (lane + 4u * (q % 2u)))) & vec4<u32>(15u)) - vec4<i32>(8);
    } else if (p.kind == KIND_Q2) {
      v = vec4<i32>((vec4<u32>(src[0]) >> (2u * (lane + 4u * q))) & vec4<u32>(3u)) - vec4<i32>(2);
    } else {
      v = bitcast<vec4<i32>>(vec4<u32>(src[q]) << (24u - 8u * lane)) >> vec4<u32>(24u);
    }
    out[q] = pack4xI8(select(vec4<i32>(0), v, col < vec4<u32>(p.cols)));
  }
  return out;
}

// The packed input codes of token t, columns c .. c + 15 (0 past `cols` or the last token).
fn input_words(t: u32, c: u32) -> vec4<u32> {
  var out = vec4<u32>(0u);
  let xb = p.x_off + t * p.x_stride + c / 4u;
  for (var q = 0u; q < 4u; q++) {
    if (t < p.n && c + 4u * q < p.cols) {
      out[q] = x[xb + q];
    }
  }
  return out;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  if (p.phase == 1u) {
    // The splits' sums of output (wg.x * 256 + li, token wg.y).
    let o = wg.x * 256u + li;
    let t = wg.y;
    if (o < p.rows && t < p.n) {
      var sum = 0;
      for (var z = 0u; z < p.splits; z++) {
        sum += part[(z * p.n + t) * p.rows + o];
      }
      y[p.y_off + t * p.y_stride + o] = srq_out(f32(sum) * p.in_scale * scale[o], p.out_scale);
    }
    return;
  }
  let o0 = wg.x * TILE;
  let t0 = wg.y * TILE;
  // This invocation's outputs: rows o0 + 4 tr + i, tokens t0 + 4 tt + j (i, j < 4).
  let tr = li % 16u;
  let tt = li / 16u;
  // What it loads per step: row (and token) li / 4, packed words 4 (li % 4) .. + 3. The next
  // step's source words and inputs are loaded before this step's products (registers), so their
  // latency overlaps them.
  let lr = li / 4u;
  let lq = (li % 4u) * 4u;
  var acc: array<vec4<i32>, 4>;  // [row i], tokens j in lanes
  for (var i = 0u; i < 4u; i++) {
    acc[i] = vec4<i32>(0);
  }
  let split = p.splits > 1u;
  let c_end = select(p.cols, min(p.cols, (wg.z + 1u) * p.kper * TILE), split);
  var c0 = select(0u, wg.z * p.kper * TILE, split);
  var wsrc = weight_words(o0 + lr, c0 + 4u * lq);
  var xsrc = input_words(t0 + lr, c0 + 4u * lq);
  for (; c0 < c_end; c0 += TILE) {
    let wc = weight_codes(wsrc, c0 + 4u * lq);
    for (var q = 0u; q < 4u; q++) {
      ws[(lq + q) * 16u + lr / 4u][lr % 4u] = wc[q];
      xs[(lq + q) * 16u + lr / 4u][lr % 4u] = xsrc[q];
    }
    workgroupBarrier();
    if (c0 + TILE < c_end) {
      wsrc = weight_words(o0 + lr, c0 + TILE + 4u * lq);
      xsrc = input_words(t0 + lr, c0 + TILE + 4u * lq);
    }
    for (var k = 0u; k < KW; k++) {
      let a = ws[k * 16u + tr];
      let b = xs[k * 16u + tt];
      for (var i = 0u; i < 4u; i++) {
        acc[i] += vec4<i32>(dot4I8Packed(a[i], b.x), dot4I8Packed(a[i], b.y),
                            dot4I8Packed(a[i], b.z), dot4I8Packed(a[i], b.w));
      }
    }
    workgroupBarrier();
  }
  for (var i = 0u; i < 4u; i++) {
    let o = o0 + 4u * tr + i;
    if (o < p.rows) {
      for (var j = 0u; j < 4u; j++) {
        let t = t0 + 4u * tt + j;
        if (t < p.n) {
          if (split) {
            part[(wg.z * p.n + t) * p.rows + o] = acc[i][j];
          } else {
            y[p.y_off + t * p.y_stride + o] =
                srq_out(f32(acc[i][j]) * p.in_scale * scale[o], p.out_scale);
          }
        }
      }
    }
  }
}
