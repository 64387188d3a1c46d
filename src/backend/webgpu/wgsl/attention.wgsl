// One query head of one token per invocation: softmax(q . K_j) V over the keys the token sees
// (causal; a sliding window keeps the last `window` positions), scale 1, f32 with the running
// maximum taken first. Caches hold position j at j % ring; kv head = head / group.
struct P {
  n: u32, heads: u32, hd: u32, group: u32,
  kv_width: u32, pos0: u32, window: u32, ring: u32,
}
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> kc: array<f32>;
@group(0) @binding(3) var<storage, read> vc: array<f32>;
@group(0) @binding(4) var<storage, read_write> o: array<f32>;

@compute @workgroup_size(32)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let h = g.x;
  let t = g.y;
  if (h >= p.heads || t >= p.n) {
    return;
  }
  let pos = p.pos0 + t;
  var first = 0u;
  if (p.window > 0u && pos + 1u > p.window) {
    first = pos + 1u - p.window;
  }
  let qb = (t * p.heads + h) * p.hd;
  let kvo = (h / p.group) * p.hd;
  var mx = -3.4e38;
  for (var j = first; j <= pos; j++) {
    let kb = (j % p.ring) * p.kv_width + kvo;
    var s = 0.0;
    for (var i = 0u; i < p.hd; i++) {
      s += q[qb + i] * kc[kb + i];
    }
    mx = max(mx, s);
  }
  var acc: array<f32, 512>;
  for (var i = 0u; i < p.hd; i++) {
    acc[i] = 0.0;
  }
  var sum = 0.0;
  for (var j = first; j <= pos; j++) {
    let kb = (j % p.ring) * p.kv_width + kvo;
    var s = 0.0;
    for (var i = 0u; i < p.hd; i++) {
      s += q[qb + i] * kc[kb + i];
    }
    let e = exp(s - mx);
    sum += e;
    for (var i = 0u; i < p.hd; i++) {
      acc[i] += e * vc[kb + i];
    }
  }
  for (var i = 0u; i < p.hd; i++) {
    o[qb + i] = acc[i] / sum;
  }
}
