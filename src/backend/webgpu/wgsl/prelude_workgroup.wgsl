// The workgroup family's reductions through workgroup memory and barriers (prepended before
// prelude.wgsl where the device has no subgroups, or they are turned off; prelude_subgroups.wgsl
// is the other choice, with the same functions). Each assumes a workgroup of 64 invocations and is
// called from uniform control flow by all of them; every invocation gets the result.

// The float-float sum of one value from each invocation (a tree in workgroup memory).
var<workgroup> ff_red: array<vec2<f32>, 64>;

// (Workgroups of more than 64 invocations call it too, all of them: the first 64's values count.)
fn ff_workgroup_sum(v: vec2<f32>, li: u32) -> vec2<f32> {
  if (li < 64u) {
    ff_red[li] = v;
  }
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (li < s) {
      ff_red[li] = ff_add(ff_red[li], ff_red[li + s]);
    }
    workgroupBarrier();
  }
  let total = ff_red[0];
  workgroupBarrier();  // everyone has read it before the next call writes
  return total;
}

// The maximum of one value from each invocation.
var<workgroup> max_red: array<f32, 64>;

fn workgroup_max(v: f32, li: u32) -> f32 {
  max_red[li] = v;
  workgroupBarrier();
  for (var s = 32u; s > 0u; s >>= 1u) {
    if (li < s) {
      max_red[li] = max(max_red[li], max_red[li + s]);
    }
    workgroupBarrier();
  }
  let m = max_red[0];
  workgroupBarrier();
  return m;
}

// `count` (<= 16) sums at once: the caller has written sum k's partial of invocation j to
// lane_i[k * 64 + j] (or lane_ff); after one barrier invocation k < count adds sum k's 64 partials
// in turn and gets it (a tree of barriers costs more, on GPUs and more so on CPU adapters); the
// other invocations get 0. Exact for i32, float-float for lane_ff.
var<workgroup> lane_i: array<i32, 1024>;
var<workgroup> lane_ff: array<vec2<f32>, 1024>;

fn i32_lane_sums(li: u32, count: u32) -> i32 {
  workgroupBarrier();
  var v = 0;
  if (li < count) {
    v = lane_i[li * 64u];
    for (var j = 1u; j < 64u; j++) {
      v += lane_i[li * 64u + j];
    }
  }
  return v;
}

fn ff_lane_sums(li: u32, count: u32) -> vec2<f32> {
  workgroupBarrier();
  var v = vec2<f32>(0.0, 0.0);
  if (li < count) {
    v = lane_ff[li * 64u];
    for (var j = 1u; j < 64u; j++) {
      v = ff_add(v, lane_ff[li * 64u + j]);
    }
  }
  return v;
}

// Teams: work shared by a few invocations with a reduction among them (attention_wg's scores,
// one key per team, its lanes over the head dimensions). Here a team is one invocation: team_begin
// gives 64 teams (team i = invocation i), team_ff_sum is the value itself, and team_sync does
// nothing (what a team writes only its own invocation reads; prelude_subgroups.wgsl's teams are
// subgroups and need the barriers).
var<private> team: u32;

fn team_begin(li: u32) -> u32 {
  team = li;
  return 64u;
}

fn team_lane() -> vec2<u32> {
  return vec2<u32>(0u, 1u);  // rank in the team, team size
}

fn team_ff_sum(v: vec2<f32>) -> vec2<f32> {
  return v;
}

fn team_sync() {}
