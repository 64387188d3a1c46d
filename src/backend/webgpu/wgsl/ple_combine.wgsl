// The per-layer inputs of one token and layer per invocation: the model projection's chunk times
// its scale, RMSNorm with the shared weight, plus the token-identity row, times 2^-0.5.
struct P { n: u32, layers: u32, width: u32, proj_scale: f32, input_scale: f32, eps: f32, }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> tok: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> pl: array<f32>;

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
    pl[base + i] = (v + tok[base + i]) * p.input_scale;
  }
}
