// The per-layer inputs of one token and layer per invocation: the model projection's chunk times
// its scale, RMSNorm with the shared weight, plus the token-identity row, times 2^-0.5. The
// token-identity rows come as the checkpoint stores them (tok: per token `stride` words, the
// embedding row's words, then for quantized kinds its scale blocks of `block` columns) and are
// decoded here as EmbeddingRow does: value = f32(code) x block scale (or the stored value), times
// embed_scale.
struct P {
  n: u32, layers: u32, width: u32, proj_scale: f32,
  input_scale: f32, eps: f32, kind: u32, stride: u32,
  row_words: u32, block: u32, embed_scale: f32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> tok: array<u32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> pl: array<f32>;

// Element i of token t's embedding row.
fn tok_value(t: u32, i: u32) -> f32 {
  let tb = t * p.stride;
  let per = kind_per_word(p.kind);
  let wd = tok[tb + i / per];
  if (p.kind >= KIND_Q2) {
    let v = f32(word_code(p.kind, wd, i % per)) * bitcast<f32>(tok[tb + p.row_words + i / p.block]);
    return v * p.embed_scale;
  }
  return word_value(p.kind, wd, i % per) * p.embed_scale;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let l = g.x;
  let t = g.y;
  if (l >= p.layers || t >= p.n) {
    return;
  }
  let base = (t * p.layers + l) * p.width;
  var ss = 0.0;
  for (var i = 0u; i < p.width; i++) {
    let v = pl[base + i] * p.proj_scale;
    ss += v * v;
  }
  let inv = inverseSqrt(ss / f32(p.width) + p.eps);
  for (var i = 0u; i < p.width; i++) {
    let v = pl[base + i] * p.proj_scale * inv * w[i];
    pl[base + i] = (v + tok_value(t, l * p.width + i)) * p.input_scale;
  }
}
