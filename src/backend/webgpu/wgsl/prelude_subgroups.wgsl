enable subgroups;

// The workgroup family's reductions with subgroup operations (WebGPU's `subgroups` feature; the
// same functions as prelude_workgroup.wgsl, prepended before prelude.wgsl in its place). Each
// assumes a workgroup of 64 invocations and is called from uniform control flow by all of them;
// every invocation gets the result.
//
// The pattern, for any subgroup size and any mapping of invocations to subgroups (WGSL defines
// neither, and a subgroup may be partial): every invocation writes its partial to workgroup
// memory; one barrier; then every subgroup adds all 64 partials, each of its active invocations a
// strided share (rank = its rank among the active invocations, step = their count) followed by a
// subgroup reduction. So each reduction costs one barrier (two with the one that frees the
// memory for the next call) instead of a tree of seven, and nothing depends on the size.
//
// Float-float sums across a subgroup are exact integer sums (below), so they do not depend on the
// order the hardware adds in either; the result carries about 46 bits of the largest partial.

fn sg_pow2(e: i32) -> f32 {
  return bitcast<f32>(u32(e + 127) << 23u);  // 2^e, -126 <= e <= 127
}

// The float-float sum of one value per active invocation of the subgroup. Each (hi, lo) is split
// on the grid of the subgroup's largest |hi| (< 2^(E+1)) into two integers of at most 23 bits,
// k1 2^(E-22) + k2 2^(E-45) (multiplications by powers of two and the remainder hi - k1 2^(E-22)
// are exact; lo is below half of hi's ulp), summed exactly with subgroupAdd in i32 (at most 128
// invocations: |sum| < 2^30), then put back together in float-float from exact pieces. Only
// integer subgroup operations (single instructions on some GPUs: NVIDIA's redux), the largest
// |hi| by its bits (the order of non-negative floats). An infinite or NaN partial gives NaN, as
// the float-float additions of prelude_workgroup.wgsl do (TwoSum of an infinity).
fn ff_subgroup_sum(v: vec2<f32>) -> vec2<f32> {
  let eb = i32(subgroupMax(bitcast<u32>(abs(v.x))) >> 23u);  // E + 127 (255: infinite or NaN)
  let e1 = clamp(eb - 149, -126, 126);  // E - 22
  let e2 = clamp(e1 - 23, -126, 126);
  let k1 = round(v.x * sg_pow2(-e1));
  let k2 = round(((v.x - k1 * sg_pow2(e1)) + v.y) * sg_pow2(-e2));
  let s1 = subgroupAdd(i32(k1));
  let s2 = subgroupAdd(i32(k2));
  // Each sum as h 2^12 + l with 0 <= l < 2^12: both halves exact in f32.
  let h1 = s1 >> 12u;
  let h2 = s2 >> 12u;
  var r = vec2<f32>(f32(h1) * sg_pow2(e1 + 12), 0.0);
  r = ff_add1(r, f32(s1 - (h1 << 12u)) * sg_pow2(e1));
  r = ff_add1(r, f32(h2) * sg_pow2(e2 + 12));
  r = ff_add1(r, f32(s2 - (h2 << 12u)) * sg_pow2(e2));
  let nan = bitcast<f32>(select(0u, 0x7fc00000u, eb == 255));
  return select(r, vec2<f32>(nan, nan), eb == 255);
}

// f32 values as u32 in the same order (negative ones reversed below the non-negative ones), for
// an integer subgroupMax.
fn sg_ordered(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  return select(b | 0x80000000u, ~b, (b >> 31u) != 0u);
}

fn sg_unordered(u: u32) -> f32 {
  return bitcast<f32>(select(~u, u & 0x7fffffffu, (u >> 31u) != 0u));
}

// This invocation's rank among the subgroup's active invocations, and their count.
fn sg_lane() -> vec2<u32> {
  return vec2<u32>(subgroupExclusiveAdd(1u), subgroupAdd(1u));
}

var<workgroup> ff_red: array<vec2<f32>, 64>;

// (Workgroups of more than 64 invocations call it too, all of them: the first 64's values count.)
fn ff_workgroup_sum(v: vec2<f32>, li: u32) -> vec2<f32> {
  if (li < 64u) {
    ff_red[li] = v;
  }
  workgroupBarrier();
  let lane = sg_lane();
  var acc = ff_red[lane.x];
  for (var i = lane.x + lane.y; i < 64u; i += lane.y) {
    acc = ff_add(acc, ff_red[i]);
  }
  let total = ff_subgroup_sum(acc);
  workgroupBarrier();  // everyone has read it before the next call writes
  return total;
}

var<workgroup> max_red: array<f32, 64>;

fn workgroup_max(v: f32, li: u32) -> f32 {
  max_red[li] = v;
  workgroupBarrier();
  let lane = sg_lane();
  var m = max_red[lane.x];
  for (var i = lane.x + lane.y; i < 64u; i += lane.y) {
    m = max(m, max_red[i]);
  }
  let total = sg_unordered(subgroupMax(sg_ordered(m)));
  workgroupBarrier();
  return total;
}

// `count` (<= 16) sums at once (prelude_workgroup.wgsl says how they are laid out): every
// subgroup adds every sum, invocation k < count keeps sum k, the others get 0. Integer sums are
// exact in any order, so the i32 results are prelude_workgroup.wgsl's bit for bit.
var<workgroup> lane_i: array<i32, 1024>;
var<workgroup> lane_ff: array<vec2<f32>, 1024>;

fn i32_lane_sums(li: u32, count: u32) -> i32 {
  workgroupBarrier();
  let lane = sg_lane();
  var mine = 0;
  for (var k = 0u; k < count; k++) {
    var a = 0;
    for (var i = lane.x; i < 64u; i += lane.y) {
      a += lane_i[k * 64u + i];
    }
    mine = select(mine, subgroupAdd(a), k == li);
  }
  return mine;
}

fn ff_lane_sums(li: u32, count: u32) -> vec2<f32> {
  workgroupBarrier();
  let lane = sg_lane();
  var mine = vec2<f32>(0.0, 0.0);
  for (var k = 0u; k < count; k++) {
    var a = vec2<f32>(0.0, 0.0);
    for (var i = lane.x; i < 64u; i += lane.y) {
      a = ff_add(a, lane_ff[k * 64u + i]);
    }
    mine = select(mine, ff_subgroup_sum(a), k == li);
  }
  return mine;
}

// Teams (prelude_workgroup.wgsl says what they are for): here the subgroups. team_begin numbers
// them 0 .. count - 1 (an atomic counter in workgroup memory, so the numbering is in whatever
// order the subgroups arrive; a team's results do not depend on its number) and returns their
// count, uniform across the workgroup; team_ff_sum is the subgroup's float-float sum; team_sync a
// workgroup barrier (what a team writes, others read). team_begin has two barriers: call it once,
// from uniform control flow.
var<private> team: u32;
var<workgroup> team_counter: atomic<u32>;
var<workgroup> team_total: u32;

fn team_begin(li: u32) -> u32 {
  var t = 0u;
  if (subgroupElect()) {
    t = atomicAdd(&team_counter, 1u);
  }
  team = subgroupBroadcastFirst(t);
  workgroupBarrier();
  if (li == 0u) {
    team_total = atomicLoad(&team_counter);
  }
  return workgroupUniformLoad(&team_total);
}

fn team_lane() -> vec2<u32> {
  return sg_lane();
}

fn team_ff_sum(v: vec2<f32>) -> vec2<f32> {
  return ff_subgroup_sum(v);
}

fn team_sync() {
  workgroupBarrier();
}
