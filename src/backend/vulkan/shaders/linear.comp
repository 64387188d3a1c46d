#version 450
// y[t][r] = epilogue(srq_out(srq_in(x[t]) . W[r])) for TOK tokens x ROWS_PER_WG rows per
// workgroup: grid.x = token group (fastest, so the groups sharing a row block run together and
// read its weights from cache), grid.y = row block; LANES invocations share a row.
// Layout: W rows are `wstride` u32 words (row bytes padded with encoded zeros), row scales f32.
// Kinds: 0 f32, 1 bf16, 2 f16, 3 int2, 4 int4, 5 int8 (offset binary, LSB first).
// Exactness: with an SRQ input scale, x is quantized to int8 (IEEE division, half-even, clamp) and
// the dot product is an exact int32 sum, scaled once in double; other products (dense kinds, and
// quantized kinds without an input scale) sum in f32, or with DSUM (below) in double as the CPU
// reference does: then the f32 result is the reference's but where a different order of the
// double sums rounds to the other side of an f32 rounding boundary (issue 34: f32 sums moved SRQ
// roundings downstream of dense linears, e.g. the PLE model projection of QAT checkpoints).
// Epilogues: 0 store, 1 gelu(y) * y2 (second weight set, gate/up), 2 softcap, 3 gelu(y) * aux,
// 4 (DP4A, one token) as 3, then the next int8 SRQ linear's product split over its columns (PJ).
#extension GL_KHR_shader_subgroup_arithmetic : enable
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_shuffle : enable
// DP4A 1 (the linear_dp module, for devices with VK_KHR_shader_integer_dot_product): the SRQ
// integer path multiplies packed int8 lanes with OpSDot. Weight words are split into 4-byte lane
// groups by masks (int2: crumbs k, k+4, k+8, k+12; int4: even / odd nibbles; int8: as stored) and
// the shared quantized input is stored permuted to match (PermCol), so the dot product sums the
// same integer products as the scalar path: bit-identical int32 results.
#ifndef DP4A
#define DP4A 0
#endif
// DSUM 1 (the linear_ds / linear_dp_ds modules): sums that are not exact integers (dense kinds, and
// quantized kinds without an input scale) accumulate products of f32 values in double, as the
// CPU reference does; DSUM 0: in f32 (faster; the dense models' contract is a tolerance).
#ifndef DSUM
#define DSUM 0
#endif
#if DSUM
#define ACCF double
#else
#define ACCF float
#endif
#if DP4A
#extension GL_EXT_spirv_intrinsics : require
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int SDot4(int a, int b, spirv_literal int fmt);
#endif
#include "common.glsl"
#define PROBE_BINDING 11  // the step buffer's binding (linears do not read it)
#include "probe.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint KIND = 0;
layout(constant_id = 2) const uint EPI = 0;
layout(constant_id = 3) const uint LANES = 32;  // invocations per row
layout(constant_id = 4) const uint XWORDS = 4;  // shared words per token (>= padded cols / 4)
layout(constant_id = 5) const uint TOK = 1;     // tokens per workgroup
layout(constant_id = 6) const uint VEC = 4;     // u32 words per weight load (4 for wide rows)
// TAIL 1 (one token, one dispatch): the last workgroup to finish applies the residual norm
//   h = (h + rmsnorm(y) * wt) * scale;  a = rmsnorm(h) * wa  (as resnorm.comp)
// to the whole output, saving a dispatch and a barrier per use.
layout(constant_id = 7) const uint TAIL = 0;
// XQ 1: read the input already SRQ-quantized (packed int8 words at binding 5) instead of
// quantizing it in the prologue; XQ 2 (gate/up, one token): also write the output quantized with
// `next_in_s` into binding 6 (zeroed before the step) for the next linear's XQ 1; XQ 3: as XQ 1,
// copied into shared memory first (the inner loop reads shared instead of global memory).
layout(constant_id = 8) const uint XQ = 0;
// PRO (one token, consumer-side residual norm, instead of the producer's TAIL): the input is
//   h' = (h + rmsnorm(t) * wt) * scale;  x = rmsnorm(h') * wa (PRO 1) or x = h' (PRO 2)
// computed by every workgroup into shared memory from t (binding 2), h (7), wt (8), wa (9);
// workgroup 0 writes h' to binding 10 when has_a is set. n = the input length (<= PRO_N).
layout(constant_id = 9) const uint PRO = 0;
layout(constant_id = 10) const uint PRO_N = 1;
// FAST 1 (DP4A, the SRQ integer path on every weight set, 16-byte weight loads, the input in
// shared memory; the host sets it): the multiply without per-word branches or dynamic indexes,
// and each weight lane group made by a shift and one three-input logic operation: an offset-
// binary int2 code c moved to a byte's top two bits and its high bit flipped,
// ((w << s) & 0xC0C0C0C0) ^ 0x80808080, is the signed byte 64 (c - 2); an int4 code likewise
// 16 (c - 8). The sums are exact multiples of 64 (16), shifted back once per row: the same
// int32 sums as the default path, so bit-identical results. (bench/journal/2026-11-sessions.md, ninth session: in
// the driver's machine code the per-word select, branch and sign fix were ~3/4 of the default
// loop's instructions.)
layout(constant_id = 11) const uint FAST = 0;
// (constant 14 is unused: weight prefetch variants, measured slower on the H200 and removed;
// bench/journal/2026-11-sessions.md, sixth to eighth sessions)
// PJ (EPI 4, the PLE gate followed by the PLE projection, one token): this workgroup's block of
// rows is a block of columns of the next linear P (int8 rows of pj_wstride words at binding 4,
// SRQ input scale pj_in_s): the block's outputs are SRQ-quantized with pj_in_s (as P's own
// prologue would) and every row j of P gets this block's part of its integer dot product added to
// pacc[j] (binding 12, zeroed before the step) with an integer atomic: exact in any order, so
// P's dispatch and the barrier before it are saved. The consumer applies P's row scales and output
// SRQ in its prologue (PRO_T).
// PRO_T 1 (PRO): t arrives as P's int32 sums (binding 2) with its row scales at binding 5:
// t = srq_out(sum * in_s * row scale), P's epilogue.
layout(constant_id = 16) const uint PRO_T = 0;
// CLUSTER 1 (one token, the SRQ integer path only: exact in any order): LANES is smaller than the
// subgroup, so several rows share a subgroup; each row's partials are summed by xor shuffles
// within its aligned cluster of LANES invocations (4 <= LANES < subgroup size).
layout(constant_id = 12) const uint CLUSTER = 0;
// PERM k (XQ 2 with DP4A consumers, GEMMA_VULKAN_XQ_PERM=1): the quantized output is written in
// the packed-dot order of a kind-k consumer (PermCol's inverse), so the consumer (XQ 4) stages it
// with plain word copies instead of four byte gathers per word. 0: natural order.
layout(constant_id = 13) const uint PERM = 0;
// PACK_ATOMIC 1: the prologue packs its quantized bytes into the shared words with atomic ors
// (GEMMA_VULKAN_PACK_ATOMIC=1); 0: the four invocations holding a word's bytes combine them with
// two xor shuffles and one of them stores the word (subgroups of at least 4 * PackStride()).
layout(constant_id = 15) const uint PACK_ATOMIC = 0;
// RMS_ALL 1: every invocation sums the subgroup partials and evaluates the RMS factor itself (one
// barrier per block reduction instead of two; the same sum in the same order)
// (GEMMA_VULKAN_RMS_ALL=1).
layout(constant_id = 17) const uint RMS_ALL = 0;
// (constant 18 is unused: timing-only variants, removed)
// FXW > 0 (one token, dense bf16 / f16 weights with 16-byte loads, no prologue; the host sets it
// to the rows' 16-byte vectors x 2): the input staged in shared memory as FXW vec4s and each weight
// vector's 8 products taken with two vec4 reads (the general path reads the input from global
// memory per element, the lanes of a row 32 bytes apart). The same FMAs in the same order: the
// same results.
layout(constant_id = 19) const uint FXW = 0;
// DJ > 0 (EPI 1, DP4A, one token; the kind code of the down projection D, int2 3 / int4 4): gate/up
// followed by D, as EPI 4 for the PLE projection. This workgroup's block of gate/up rows is a block
// of D's columns (DJW whole words of each D row, at binding 13, pj_wstride words per row): the
// block's outputs are SRQ-quantized with D's input scale (next_in_s, as XQ 2 writes them for D's
// own kernel), multiplied with those words by packed dot products, and each of D's rows keeps its
// partial sum in registers over the workgroup's blocks, added once to pacc[j] (binding 12, zeroed
// before the step) with an integer atomic: exact in any order, the same int32 sums as D's kernel.
// D's dispatch and the barrier before it are saved; the consumer applies D's epilogue (PRO_T).
layout(constant_id = 20) const uint DJ = 0;
// DJM bits (DJ): 1 D's words loaded after gate/up's epilogue instead of before the multiply
// (GEMMA_VULKAN_DOWN_FUSE_LATE), 2 read from the pair-major copy at binding 13 (pair c of row j at
// c * pj_rows + j; GEMMA_VULKAN_DOWN_FUSE_PAIRS).
layout(constant_id = 21) const uint DJM = 0;
// ACC_COPIES (DJ, PRO_T): the int32 sums are kept in this many copies of n (pj_rows / PRO_N)
// entries: a DJ workgroup adds into copy gl_WorkGroupID.y % ACC_COPIES (its atomics spread over
// more addresses), a PRO_T prologue adds the copies up (integers: exact in any order).
layout(constant_id = 22) const uint ACC_COPIES = 1;
// PFB > 0 (FAST or FXW, one weight set, one token, a workgroup looping over several row blocks;
// the host sets it to the most 16-byte vectors a lane holds in a row, <= 4;
// GEMMA_VULKAN_MV_PREFETCH_BLOCK, GEMMA_VULKAN_DENSE_PREFETCH): the next block's vectors are
// loaded into registers before this block is multiplied, so they arrive while this block's
// multiply, reduction and epilogue run (the LM head: 15-16 blocks per workgroup; the bf16 PLE model
// projection: 4-5, whose loop otherwise waits for a row's vectors in two rounds).
layout(constant_id = 23) const uint PFB = 0;
// DUAL_LOOP 1 (FAST, EPI 1: gate/up; GEMMA_VULKAN_MV_DUAL_LOOP): both weight sets' vectors loaded
// in one loop, a lane's gate and up vectors in flight together, instead of one loop per set. The
// same int32 sums per set in the same order.
layout(constant_id = 24) const uint DUAL_LOOP = 0;
// PAIR_LOOP k (2-4; FAST, one weight set, PFB 0; GEMMA_VULKAN_MV_PAIR_LOOP): k of a lane's
// vectors (j4, j4 + LANES, ...) loaded together, k in flight, instead of one per iteration (DUAL_LOOP
// k > 1: k of each set's). The same sums in the same order.
layout(constant_id = 25) const uint PAIR_LOOP = 0;
// XCM 1 (FAST, int2 / int4, 16-byte weight vectors; GEMMA_VULKAN_MV_XCM): the shared input words
// stored chunk-major: the 4-word chunk c of weight vector j4 (a vector's input spans XS = 16 int2
// / 8 int4 words, XS / 4 chunks) at word 4 (c NV + j4) instead of XS j4 + 4 c (NV = XWORDS / XS
// vectors), so the lanes of a row, which multiply consecutive vectors, read consecutive 16-byte
// chunks (no shared-memory bank conflicts; the natural layout puts an int2 row's 8 lanes 64 bytes
// apart, 4 to a bank group). The same words: the same sums.
layout(constant_id = 26) const uint XCM = 0;
// (constant 27 is unused: timing-only variants, removed)
// PRO_VEC 1 (PRO; GEMMA_VULKAN_PRO_VEC): the prologue's element u of invocation tid is column
// 8 tid + u, its operands read as two 16-byte vectors per array, and its quantized bytes packed
// into whole words in registers (VecSlot: int4 / int8 two words of their own, int2 two bytes of
// each of four words completed by one xor shuffle) instead of columns tid + u WG read one float at
// a time and two shuffles per byte. The same values; the sums of squares add the elements in
// another order (double sums of f32 squares).
layout(constant_id = 28) const uint PRO_VEC = 0;
// PFE 1 (PFB; GEMMA_VULKAN_MV_PREFETCH_EARLY): the first block's vectors loaded at the kernel's
// start, so they arrive during the prologue / the input's quantization, instead of after it. Set
// where a grid has at most two workgroups per compute unit (q, k, v, o on the H200): the registers
// they hold through the prologue cost no occupancy there. The same values.
layout(constant_id = 29) const uint PFE = 0;
// PFE_LATE 1 (GEMMA_VULKAN_MV_PREFETCH_EARLY_LATE): in a norm prologue the early weight loads (PFE)
// are issued after the prologue's operand loads instead of before them, so the operands do not
// queue behind the weights.
layout(constant_id = 30) const uint PFE_LATE = 0;
// RMS_FAST 1 (GEMMA_VULKAN_RMS_FAST): the prologue's RMS factors without the double division and
// square root (library calls of ~100 instructions each on the NVIDIA driver): the mean by the
// constant reciprocal of PRO_N with one exact correction, 1 / sqrt from the f32 estimate and two
// Newton steps in double (common.glsl InvSqrtNewton, as attn_fused's q/k norms), rounded to f32:
// the reference's factor except where the exact value lies within a few double ulps of an f32
// rounding boundary.
layout(constant_id = 31) const uint RMS_FAST = 0;
// SHARE_X 1 (two weight sets with the same input scale, e.g. gate and up; GEMMA_VULKAN_SHARE_X):
// the input is quantized once and both sets read set 0's words.
layout(constant_id = 32) const uint SHARE_X = 0;
// FXG 1 (one token, dense bf16 / f16 rows of whole 16-byte vectors, no prologue, an input longer
// than FXW stages: the down projections): the multiply reads the input's vec4s from global memory
// (binding 2, shared by every row: cache hits) instead of shared memory. The same FMAs in the same
// order as FXW and the general path.
layout(constant_id = 33) const uint FXG = 0;
// KSPLIT > 0 (short steps of 2-16 tokens, FAST, one weight set, no PRO, tail or fusion; the
// host sets it for long rows): split K. Workgroup z takes the KSPLIT 16-byte weight vectors
// z KSPLIT .. of each row (XWORDS: their input words, quantized from the columns they multiply)
// and adds its int32 sums to ksum[t rows + row] (binding 12) with integer atomics, exact in any
// order. The last of a row block's splits to add its sums (a counter per token group and row
// block at binding 7, set back to zero by that workgroup) applies the row scales and the epilogue
// to the block's rows (common.glsl SplitKOut) and zeroes the sums for the region's next use.
layout(constant_id = 34) const uint KSPLIT = 0;
// PRO_M 1 / 2 (steps of 2-16 tokens on the integer path; the host sets it with ROWS_PRO): PRO's
// consumer-side residual norm for each of the workgroup's TOK tokens, h' = (h + rmsnorm(t) * wt)
// * scale and x = rmsnorm(h') * wa (1) or x = h' (2), t the input rows (binding 2), h's rows at
// binding 13, n = PRO_MN: each token's factors in the one-token prologue's order, then the
// values computed again as they are quantized (the same operations, so each token's input is
// the one-token step's, bit for bit). The workgroups (x, 0, 0) write their tokens' h' rows to
// binding 10 when has_a is set. With KSPLIT every split computes the whole rows' factors and
// quantizes its own columns.
layout(constant_id = 35) const uint PRO_M = 0;
layout(constant_id = 36) const uint PRO_MN = 1;

layout(std430, binding = 0) readonly buffer W0 { uvec4 w0[]; };
layout(std430, binding = 1) readonly buffer S0 { float s0[]; };
layout(std430, binding = 2) readonly buffer X { float x[]; };
layout(std430, binding = 3) coherent buffer Y { float y[]; };
layout(std430, binding = 4) readonly buffer W1 { uvec4 w1[]; };
layout(std430, binding = 5) readonly buffer S1 { float s1[]; };
layout(std430, binding = 5) readonly buffer XQin { uint xq_in[]; };     // XQ 1, 3 (not dual)
layout(std430, binding = 6) buffer XQout { uint xq_out[]; };           // XQ 2 (EPI 1)
layout(std430, binding = 6) readonly buffer Aux { float aux[]; };
layout(std430, binding = 6) coherent buffer Counter { uint done_wgs; };  // TAIL (no EPI 3)
layout(std430, binding = 7) buffer Hres { float hres[]; };
layout(std430, binding = 7) coherent buffer KCount { uint kcount[]; };  // KSPLIT
layout(std430, binding = 8) readonly buffer WT { float wt[]; };
layout(std430, binding = 9) readonly buffer WA { float wa[]; };
layout(std430, binding = 10) writeonly buffer A { float anorm[]; };
layout(std430, binding = 2) readonly buffer XI { int xi[]; };     // PRO_T: P's int32 sums
layout(std430, binding = 4) readonly buffer W1W { uint w1w[]; };  // EPI 4: P's rows
layout(std430, binding = 12) buffer PAcc { int pacc[]; };         // EPI 4, DJ: P's int32 sums
layout(std430, binding = 12) buffer KSum { int ksum[]; };         // KSPLIT: the int32 sums
layout(std430, binding = 13) readonly buffer DWW { uvec2 djw[]; };  // DJ: D's rows (word pairs)
layout(std430, binding = 13) readonly buffer HM { float hm[]; };     // PRO_M: h's rows
// PRO_VEC: 16-byte views of the prologue's operands (the same bindings).
layout(std430, binding = 2) readonly buffer X4 { vec4 x4[]; };
layout(std430, binding = 2) readonly buffer XI4 { ivec4 xi4[]; };
layout(std430, binding = 5) readonly buffer S14 { vec4 s14[]; };
layout(std430, binding = 7) readonly buffer Hres4 { vec4 hres4[]; };
layout(std430, binding = 8) readonly buffer WT4 { vec4 wt4[]; };
layout(std430, binding = 9) readonly buffer WA4 { vec4 wa4[]; };
layout(std430, binding = 10) writeonly buffer A4 { vec4 anorm4[]; };

layout(push_constant) uniform P {
  uint rows;      // rows in this part
  uint cols;
  uint wstride;   // u32 words per row (a multiple of 4)
  uint x_stride;  // floats per token in x
  uint y_stride;
  uint y_off;     // first output column (row_base of a split part)
  float in_s0, out_s0, in_s1, out_s1;
  float cap;
  uint aux_stride, aux_off;
  uint x_row0;    // first token row of x (head rows)
  uint ntok;      // token rows
  uint n, has_a, has_wa;  // TAIL: vector length (= rows), flags
  float scale, eps;
  float next_in_s;        // XQ 2
  uint xq_ld_, kper_;     // (linear_cm's)
  float pj_in_s, pj_out_s;  // EPI 4 / PRO_T: the next linear P's SRQ scales
  uint pj_rows, pj_wstride; // EPI 4, DJ: P's (D's) rows and u32 words per row
  float pt_in_s, pt_out_s;  // PRO_T: the SRQ scales of the linear whose sums t holds
} p;

const uint DUAL = (EPI == 1) ? 2 : 1;
const uint WG = gl_WorkGroupSize.x;
const uint ROWS_PER_WG = WG / LANES;
const uint MAX_SG = WG / 4;
const uint XS = KIND == 3 ? 16 : 8;  // XCM: a weight vector's input words
const uint XNV = XWORDS / XS;        // XCM: weight vectors per row
const uint XSETS = SHARE_X != 0 ? 1 : DUAL;  // quantized inputs (SHARE_X: set 0's for both)
shared uint xq[XSETS * TOK * XWORDS];
shared int red_i[DUAL * TOK * MAX_SG];
shared ACCF red_f[DUAL * TOK * MAX_SG];
shared double red_d[256];  // [slot][subgroup] (128 per slot)
shared bool last_wg;
// PRO: the normed input (read by the float path and the separate quantization pass).
shared float xs[PRO_N];

shared float rms_bc[2];
shared float prom_r[8];  // PRO_M: each token's two factors (TOK <= 4)
shared vec4 xf4[FXW + 1];  // FXW: the input
shared int pj_q[ROWS_PER_WG];  // EPI 4: the block's outputs quantized for P
const uint PJW = ROWS_PER_WG / 4;  // EPI 4: P's words per row in a block (<= 16: the host checks)
// DJ: D's words per row in a block (2, 4 or 8: the host checks), the lane groups of a word (int2 4,
// int4 2)
const uint DJW = DJ == 3 ? ROWS_PER_WG / 16 : ROWS_PER_WG / 8;
const uint DJP = DJW >= 2 ? DJW / 2 : 1;  // word pairs
const uint DJG = DJ == 3 ? 4 : 2;

#include "linear_ops.glsl"

void main() {
  const uint tid = gl_LocalInvocationID.x;
  const uint lane = tid % LANES;
  const uint rloc = tid / LANES;
  const uint tg = gl_WorkGroupID.x * TOK;  // first token (relative to x_row0)
  const bool quant = KIND >= 3;
  float in_s[2] = float[2](p.in_s0, p.in_s1);
  int_path[0] = quant && p.in_s0 > 0.0;
  int_path[1] = quant && p.in_s1 > 0.0;

  // KSPLIT: this workgroup's first column and weight vector, and its vectors per row.
  const uint col0 = KSPLIT * gl_WorkGroupID.z * 4 * ElemsPerWord();
  row_v0 = KSPLIT * gl_WorkGroupID.z;
  row_nv = KSPLIT > 0 ? min(KSPLIT, p.wstride / 4 - row_v0) : p.wstride / 4;
  Probe(0);
  // PFB: the lane's vectors of the next block's row (PFE: the first block's loaded here, or with
  // PFE_LATE after a norm prologue's operand loads).
  uvec4 wnx[4];
  const bool early_loads = PFB > 0 && PFE != 0, late_loads = PFE_LATE != 0 && PRO != 0;
  if (early_loads && !late_loads) LoadFirstBlock(wnx, lane, rloc);
  // PRO with a quantized input: the prologue quantizes its own values straight into the packed
  // shared words (XqWord), so the words start at zero (ordered by the prologue's barriers).
  const bool pro_q = PRO != 0 && XQ != 1 && XQ != 3 && XQ != 4 &&
                     (int_path[0] || (DUAL == 2 && int_path[1]));
  // Shuffle packing: element i = tid + u * WG sits in lane i % subgroup size, so the four
  // columns of a word lie in one subgroup when it spans 4 * PackStride() lanes.
  const bool pack_shuffle = PACK_ATOMIC == 0 && gl_SubgroupSize >= 4 * PackStride() &&
                            WG % (4 * PackStride()) == 0 && XWORDS <= 2 * WG;
  // PRO_VEC (above): every word below XWORDS is stored whole.
  const bool vec8 = PRO_VEC != 0 && PRO_N % 8 == 0 && PRO_N <= 8 * WG && XWORDS <= 2 * WG &&
                    gl_SubgroupSize >= 2;
  if (pro_q && !pack_shuffle && !vec8) {
    for (uint i = tid; i < XSETS * XWORDS; i += WG) xq[i] = 0;
  }

  if (PRO != 0 && vec8) {
    // As below, with the invocation's columns 8 tid .. 8 tid + 7 (PRO_N % 8 == 0).
    Probe2(0);
    const uint c0 = 8 * tid;
    const bool has = c0 < PRO_N;
    double ss = 0.0LF;
    float tv[8], hv[8], wtv[8], wav[8];
    if (has) {
      [[unroll]] for (uint h = 0; h < 2; ++h) {
        const uint v = 2 * tid + h;
        vec4 t;
        if (PRO_T != 0) {
          ivec4 sum = xi4[v];
          [[unroll]] for (uint c = 1; c < ACC_COPIES; ++c) sum += xi4[c * (PRO_N / 4) + v];
          const vec4 sc = s14[v];
          [[unroll]] for (uint e = 0; e < 4; ++e) t[e] = ProT(sum[e], sc[e]);
        } else {
          t = x4[v];
        }
        const vec4 hh = hres4[v];
        const vec4 w = wt4[v];
        const vec4 a = PRO == 1 ? wa4[v] : vec4(0.0);
        [[unroll]] for (uint e = 0; e < 4; ++e) {
          tv[4 * h + e] = t[e];
          hv[4 * h + e] = hh[e];
          wtv[4 * h + e] = w[e];
          wav[4 * h + e] = a[e];
        }
      }
      [[unroll]] for (uint u = 0; u < 8; ++u) ss = fma(double(tv[u]), double(tv[u]), ss);
    }
    if (early_loads && late_loads) LoadFirstBlock(wnx, lane, rloc);
    Probe2(1);
    const float r = BlockRmsFactor(ss, p.n, p.eps, 0);
    Probe2(2);
    const bool write_h = p.has_a != 0 && gl_WorkGroupID.x == 0 && gl_WorkGroupID.y == 0;
    double ss2 = 0.0LF;
    if (has) {
      [[unroll]] for (uint u = 0; u < 8; ++u) {
        precise float v = (tv[u] * r) * wtv[u];
        precise float o = (hv[u] + v) * p.scale;
        hv[u] = o;
        ss2 = fma(double(o), double(o), ss2);
      }
      if (write_h) {
        anorm4[2 * tid] = vec4(hv[0], hv[1], hv[2], hv[3]);
        anorm4[2 * tid + 1] = vec4(hv[4], hv[5], hv[6], hv[7]);
      }
    }
    Probe2(3);
    const float r2 = PRO == 1 ? BlockRmsFactor(ss2, p.n, p.eps, 1) : 1.0;
    Probe2(4);
    const bool keep_xs = !pro_q || !int_path[0] || (DUAL == 2 && !int_path[1]);
    float xv[8];
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      xv[u] = has ? ProInput(PRO, hv[u], r2, wav[u]) : 0.0;
      if (keep_xs && has) xs[c0 + u] = xv[u];
    }
    if (pro_q) {
      [[unroll]] for (uint d = 0; d < DUAL; ++d) {
        if (!QuantizesFor(d)) continue;
        const float rq = SrqReciprocal(in_s[d]);
        uint wq[4] = uint[4](0u, 0u, 0u, 0u);
        [[unroll]] for (uint u = 0; u < 8; ++u) {
          const uvec2 sl = VecSlot(u, tid);
          if (c0 + u < PRO_N && c0 + u < p.cols)
            wq[sl.x] |= (uint(QuantizeSrqR(xv[u], in_s[d], rq)) & 0xFFu) << (8 * sl.y);
        }
        if (DP4A != 0 && KIND == 3) {
          // int2: words 4 (tid / 2) + 0..3, two bytes each here and two in the neighbour; the even
          // invocation stores the first two, the odd one the last two.
          [[unroll]] for (uint k = 0; k < 4; ++k) wq[k] |= subgroupShuffleXor(wq[k], 1);
          const bool odd = (tid & 1) != 0;
          const uint w = 4 * (tid >> 1) + (odd ? 2 : 0);
          if (w < XWORDS) xq[d * XWORDS + XqAt(w)] = odd ? wq[2] : wq[0];
          if (w + 1 < XWORDS) xq[d * XWORDS + XqAt(w + 1)] = odd ? wq[3] : wq[1];
        } else {
          if (2 * tid < XWORDS) xq[d * XWORDS + XqAt(2 * tid)] = wq[0];
          if (2 * tid + 1 < XWORDS) xq[d * XWORDS + XqAt(2 * tid + 1)] = wq[1];
        }
      }
    }
    Probe2(5);
    barrier();
    Probe2(6);
  } else if (PRO != 0) {
    // h' and the normed input from the residual stream and the previous linear's raw output.
    // Every operand is loaded first (n <= 8 WG; the host checks): one memory round trip instead
    // of one per pass. Sums in the same order as a loop over i.
    // The length is the constant PRO_N (= p.n), so the bounds below are known when the kernel
    // is compiled: the loads form one straight run.
    Probe2(0);
    double ss = 0.0LF;
    float tv[8], hv[8], wtv[8], wav[8];
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint i = tid + u * WG;
      if (i < PRO_N) {
        float t;
        if (PRO_T != 0) {
          int sum = xi[i];
          [[unroll]] for (uint c = 1; c < ACC_COPIES; ++c) sum += xi[c * PRO_N + i];
          t = ProT(sum, s1[i]);
        } else {
          t = x[i];
        }
        const float h = hres[i];
        const float w = wt[i];
        // (unconditional: without wa the host binds wt there, so the load joins the run)
        const float a = PRO == 1 ? wa[i] : 0.0;
        tv[u] = t;
        hv[u] = h;
        wtv[u] = w;
        wav[u] = a;
        ss = fma(double(t), double(t), ss);
      }
    }
    if (early_loads && late_loads) LoadFirstBlock(wnx, lane, rloc);
    Probe2(1);  // operands loaded, this invocation's sum of squares
    const float r = BlockRmsFactor(ss, p.n, p.eps, 0);
    Probe2(2);
    const bool write_h = p.has_a != 0 && gl_WorkGroupID.x == 0 && gl_WorkGroupID.y == 0;
    double ss2 = 0.0LF;
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      const uint i = tid + u * WG;
      if (i < PRO_N) {
        precise float v = (tv[u] * r) * wtv[u];
        precise float o = (hv[u] + v) * p.scale;
        hv[u] = o;
        if (write_h) anorm[i] = o;
        ss2 = fma(double(o), double(o), ss2);
      }
    }
    Probe2(3);  // h' and its sum of squares
    const float r2 = PRO == 1 ? BlockRmsFactor(ss2, p.n, p.eps, 1) : 1.0;
    Probe2(4);
    float rq[2];
    [[unroll]] for (uint d = 0; d < DUAL; ++d) rq[d] = SrqReciprocal(in_s[d]);
    // The float values are read later only by a float path or the separate quantization pass.
    const bool keep_xs = !pro_q || !int_path[0] || (DUAL == 2 && !int_path[1]);
    [[unroll]] for (uint u = 0; u < 8; ++u) {
      if (u * WG >= max(PRO_N, 4 * XWORDS)) break;  // (known when compiled)
      const uint i = tid + u * WG;
      float xv = 0.0;
      if (i < PRO_N) {
        xv = ProInput(PRO, hv[u], r2, wav[u]);
        if (keep_xs) xs[i] = xv;
      }
      if (!pro_q) continue;
      const uvec2 wb = XqWord(i);
      [[unroll]] for (uint d = 0; d < DUAL; ++d) {
        if (!QuantizesFor(d)) continue;
        uint q = 0;
        if (i < PRO_N && i < p.cols)
          q = (uint(QuantizeSrqR(xv, in_s[d], rq[d])) & 0xFFu) << (8 * wb.y);
        if (pack_shuffle) {
          // (every word below XWORDS is written: zero bytes past the columns)
          q |= subgroupShuffleXor(q, PackStride());
          q |= subgroupShuffleXor(q, 2 * PackStride());
          if ((tid & (3 * PackStride())) == 0 && wb.x < XWORDS) xq[d * XWORDS + XqAt(wb.x)] = q;
        } else if (q != 0) {
          atomicOr(xq[d * XWORDS + XqAt(wb.x)], q);
        }
      }
    }
    Probe2(5);  // this invocation's values quantized
    barrier();
    Probe2(6);
  }
  if (PRO_M != 0) {
    // Each token's factors as the one-token prologue (PRO) computes them, one token at a time.
    const bool write_h = p.has_a != 0 && gl_WorkGroupID.y == 0 && gl_WorkGroupID.z == 0;
    for (uint tt = 0; tt < TOK; ++tt) {
      const uint t = tg + tt;
      if (t >= p.ntok) break;  // (uniform)
      const uint xb = (t + p.x_row0) * p.x_stride, hb = t * PRO_MN;
      double ss = 0.0LF;
      float tv[8], hv[8], wtv[8];
      [[unroll]] for (uint u = 0; u < 8; ++u) {
        const uint i = tid + u * WG;
        tv[u] = 0.0;
        hv[u] = 0.0;
        wtv[u] = 0.0;
        if (i < PRO_MN) {
          tv[u] = x[xb + i];
          hv[u] = hm[hb + i];
          wtv[u] = wt[i];
          ss = fma(double(tv[u]), double(tv[u]), ss);
        }
      }
      const float r = BlockRmsFactor(ss, PRO_MN, p.eps, 0);
      double ss2 = 0.0LF;
      [[unroll]] for (uint u = 0; u < 8; ++u) {
        const uint i = tid + u * WG;
        if (i < PRO_MN) {
          precise float v = (tv[u] * r) * wtv[u];
          precise float o = (hv[u] + v) * p.scale;
          if (write_h) anorm[hb + i] = o;
          ss2 = fma(double(o), double(o), ss2);
        }
      }
      const float r2 = PRO_M == 1 ? BlockRmsFactor(ss2, PRO_MN, p.eps, 1) : 1.0;
      if (tid == 0) {
        prom_r[2 * tt] = r;
        prom_r[2 * tt + 1] = r2;
      }
      // (RMS_ALL: every invocation reads the sums after BlockRmsFactor's one barrier, so the
      // next token's sums wait for them)
      if (RMS_ALL != 0) barrier();
    }
    barrier();
  }
  Probe(1);  // after the consumer-norm prologue
  if (XQ == 3 || XQ == 4) {
    // The input arrives quantized (binding 5); stage it in shared memory for the inner loop (XQ 4:
    // already in this kernel's order).
    for (uint i = tid; i < TOK * XWORDS; i += WG) {
      const uint tt = i / XWORDS;
      uint v = 0;
      if (tg + tt < p.ntok) {
        if (DP4A == 0 || XQ == 4) {
          v = xq_in[tg * XWORDS + i];
        } else {
          [[unroll]] for (uint b = 0; b < 4; ++b) {
            const uint c = PermCol(i - tt * XWORDS, b);
            v |= ((xq_in[(tg + tt) * XWORDS + (c >> 2)] >> (8 * (c & 3))) & 0xFFu) << (8 * b);
          }
        }
      }
      xq[tt * XWORDS + XqAt(i - tt * XWORDS)] = v;
    }
    barrier();
  } else if (!pro_q && XQ != 1 && (int_path[0] || (DUAL == 2 && int_path[1]))) {
    // (the permuted layout spans the row; KSPLIT: this workgroup's columns col0 ..)
    const uint nw = DP4A == 0 ? (p.cols + 3) / 4 : XWORDS;
    for (uint d = 0; d < DUAL; ++d) {
      if (!QuantizesFor(d)) continue;
      const float rs = SrqReciprocal(in_s[d]);
      for (uint tt = 0; tt < TOK; ++tt) {
        const uint t = tg + tt;
        const uint xb = (t + p.x_row0) * p.x_stride;
        for (uint i = tid; i < nw; i += WG) {
          uint packed = 0;
          if (t < p.ntok) {
            for (uint k = 0; k < 4; ++k) {
              const uint c = col0 + PermCol(i, k);
              const int q = c >= p.cols ? 0
                            : QuantizeSrqR(PRO_M != 0 ? ProMInput(tt, t, c)
                                           : PRO != 0 ? xs[c]
                                                      : x[xb + c],
                                           in_s[d], rs);
              packed |= (uint(q) & 0xFFu) << (8 * k);
            }
          }
          xq[(d * TOK + tt) * XWORDS + XqAt(i)] = packed;
        }
      }
    }
    barrier();
  }

  // PFB: the lane's vectors of the next block's row (the first block's loaded here; with FXW
  // before the input is staged, so they arrive during it).
  if (PFB > 0 && FXW > 0 && PFE == 0) LoadFirstBlock(wnx, lane, rloc);
  if (FXW > 0) {
    const uint xb = (tg + p.x_row0) * p.x_stride;
    for (uint i = tid; i < FXW; i += WG) {
      vec4 v = vec4(0.0);
      // (PRO: the prologue's normalized input, in xs since its barrier)
      [[unroll]] for (uint c = 0; c < 4; ++c)
        if (4 * i + c < p.cols) v[c] = PRO != 0 ? xs[4 * i + c] : x[xb + 4 * i + c];
      xf4[i] = v;
    }
    barrier();
  }
  if (FXG != 0) xg4 = ((tg + p.x_row0) * p.x_stride) / 4;
  Probe(2);  // after the input is quantized / staged
  // Row blocks: one per workgroup, or (one-token steps with a capped grid) a loop over blocks
  // gl_NumWorkGroups.y apart, so the prologue above runs once per workgroup. Uniform per workgroup.
  const uint nblk = (p.rows + ROWS_PER_WG - 1) / ROWS_PER_WG;
  if (PFB > 0 && FXW == 0 && PFE == 0) LoadFirstBlock(wnx, lane, rloc);
  int dsum[8];  // DJ: D's partial sums of rows tid + WG r over this workgroup's blocks
  [[unroll]] for (uint r = 0; r < 8; ++r) dsum[r] = 0;
  for (uint blk = gl_WorkGroupID.y; blk < nblk; blk += gl_NumWorkGroups.y) {
    const uint row = blk * ROWS_PER_WG + rloc;
    [[unroll]] for (uint i = 0; i < 2 * TOK; ++i) {
      acc_i[i] = 0;
      acc_f[i] = ACCF(0.0);
    }
    // The epilogue's per-row operands, loaded before the multiply so their latency overlaps it
    // (after the reduction's barrier they would be one more memory round trip).
    float row_s[2] = float[2](1.0, 1.0);
    float aux_v = 0.0;
    if (row < p.rows && lane < TOK && tg + lane < p.ntok) {
      if (quant) {
        row_s[0] = s0[row];
        if (DUAL == 2) row_s[1] = s1[row];
      }
      if (EPI == 3 || EPI == 4) aux_v = aux[(tg + lane) * p.aux_stride + p.aux_off + row];
    }
    // EPI 4: this block's columns of P's rows (the lane's rows tid + WG r), loaded before the
    // multiply so their latency overlaps it (blocks of up to 16 rows; longer ones load later).
    uint pw[8][4];
#if DP4A
    if (EPI == 4 && PJW <= 4) {
      const uint c0w = blk * PJW;
      [[unroll]] for (uint r = 0; r < 8; ++r) {
        const uint j = tid + WG * r;
        [[unroll]] for (uint k = 0; k < 4; ++k)
          pw[r][k] = j < p.pj_rows && k < PJW && c0w + k < p.pj_wstride
                         ? w1w[j * p.pj_wstride + c0w + k]
                         : 0u;
      }
    }
#endif
    // DJ: this block's words of D's rows, loaded before the multiply (as EPI 4's; DJM 1: after the
    // epilogue, below).
    uvec2 dw[8][DJP];
    if (DJ != 0 && (DJM & 1) == 0) LoadDj(blk, dw);
    // PFB: this block's vectors, and the next block's issued now.
    uvec4 wcur[4];
    if (PFB > 0) {
      wcur = wnx;
      const uint nrow = (blk + gl_NumWorkGroups.y) * ROWS_PER_WG + rloc;
      [[unroll]] for (uint v = 0; v < 4; ++v)
        wnx[v] = v < PFB && nrow < p.rows && lane + LANES * v < p.wstride / 4
                     ? w0[nrow * (p.wstride / 4) + lane + LANES * v]
                     : uvec4(0u);
    }
#if DP4A
    const bool dual_loop = DUAL_LOOP != 0 && DUAL == 2 && FAST != 0 && VEC == 4 && FXW == 0 &&
                           PFB == 0;
    if (row < p.rows && dual_loop) MultiplyFast2(row * (p.wstride / 4), lane);
#else
    const bool dual_loop = false;
#endif
    if (row < p.rows && !dual_loop) {
      [[unroll]] for (uint d = 0; d < DUAL; ++d) {
        if (VEC == 4) {
          const uint base = row * (p.wstride / 4);
          if (FXW > 0 || FXG != 0) {
            if (PFB > 0) {
              MultiplyDenseRegs(wcur, lane);
            } else if (d == 0) {
              MultiplyDense(base, lane);  // (every set)
            }
            continue;
          }
#if DP4A
          if (PFB > 0) {
            MultiplyFastRegs(wcur, lane);
            continue;
          }
          if (FAST != 0 && PAIR_LOOP != 0) {
            MultiplyFastPair(base, lane, d);
            continue;
          }
          if (FAST != 0) {
            MultiplyFast(base + row_v0, lane, d);
            continue;
          }
#endif
          for (uint j4 = lane; j4 < p.wstride / 4; j4 += LANES) {
            const uvec4 w4 = WeightVec(d, base, j4);
            [[dont_unroll]] for (uint q4 = 0; q4 < 4; ++q4) Accumulate(w4[q4], 4 * j4 + q4, d, tg);
          }
        } else {
          const uint base = row * p.wstride;
          for (uint j = lane; j < p.wstride; j += LANES) {
            const uint w = d == 0 ? w0[(base + j) >> 2][(base + j) & 3]
                                  : w1[(base + j) >> 2][(base + j) & 3];
            Accumulate(w, j, d, tg);
          }
        }
      }
    }
    if (blk == gl_WorkGroupID.y) Probe(3);  // first block multiplied
    // Reduce each row's LANES partials: subgroups first (CLUSTER: xor shuffles within the row's
    // cluster), then, for rows spanning several subgroups, shared memory. A row within one
    // subgroup (CLUSTER, or LANES = the subgroup size) ends with its sums in every lane's
    // registers (sum_i / sum_f): no shared memory, no barrier (uniform: the subgroup size is the
    // same for the whole workgroup).
    const uint nsg = CLUSTER != 0 ? ROWS_PER_WG : WG / gl_SubgroupSize;
    const bool in_regs = CLUSTER != 0 || LANES == gl_SubgroupSize;
    int sum_i[2 * TOK];
    ACCF sum_f[2 * TOK];
    [[unroll]] for (uint i = 0; i < DUAL * TOK; ++i) {
      if (CLUSTER != 0) {
        int si = acc_i[i];
        ACCF sf = acc_f[i];  // (zero on the integer path)
        [[unroll]] for (uint off = LANES / 2; off > 0; off /= 2) {
          si += subgroupShuffleXor(si, off);
          sf += subgroupShuffleXor(sf, off);
        }
        sum_i[i] = si;
        sum_f[i] = sf;
      } else {
        const int si = subgroupAdd(acc_i[i]);
        const ACCF sf = subgroupAdd(acc_f[i]);
        sum_i[i] = si;
        sum_f[i] = sf;
        if (!in_regs && subgroupElect()) {
          red_i[i * nsg + gl_SubgroupID] = si;
          red_f[i * nsg + gl_SubgroupID] = sf;
        }
      }
    }
    if (!in_regs) barrier();
    if (blk == gl_WorkGroupID.y) Probe(4);  // first block reduced
    // Lanes 0..TOK-1 of the row finish one token each.
    const uint tt = lane;
    const uint t = tg + tt;
    // KSPLIT: the integer sums added to ksum (the integer path, one set: the host checks).
    if (row < p.rows && tt < TOK && t < p.ntok) {
      const uint per_row = CLUSTER != 0 ? 1 : LANES / gl_SubgroupSize;
      float v[2];
      float out_s[2] = float[2](p.out_s0, p.out_s1);
      [[unroll]] for (uint d = 0; d < DUAL; ++d) {
        int ti = 0;
        ACCF tf = ACCF(0.0);
        if (in_regs) {
          // (the index is the lane's own token: a dynamic index into a small register array)
          [[unroll]] for (uint i = 0; i < TOK; ++i) {
            if (i == tt) {
              ti = sum_i[d * TOK + i];
              tf = sum_f[d * TOK + i];
            }
          }
        } else {
          const uint rb = (d * TOK + tt) * nsg + rloc * per_row;
          for (uint k = 0; k < per_row; ++k) {
            ti += red_i[rb + k];
            tf += red_f[rb + k];
          }
        }
        if (KSPLIT > 0) {
          atomicAdd(ksum[t * p.rows + row], ti);
          break;
        }
        const float rs = row_s[d];
        float r;
        if (int_path[d]) {
          r = float(double(ti) * double(in_s[d]) * double(rs));
        } else {
          r = float(quant ? tf * ACCF(rs) : tf);
        }
        if (out_s[d] > 0.0) r = Srq(r, out_s[d]);
        v[d] = r;
      }
      if (KSPLIT == 0) {
        float outv = v[0];
        if (EPI == 1) outv = GeluTanh(v[0]) * v[1];
        if (EPI == 2 && p.cap > 0.0) outv = TanhClamped(ExactDiv(v[0], p.cap)) * p.cap;
        if (EPI == 3 || EPI == 4) outv = GeluTanh(v[0]) * aux_v;
        if (EPI == 4) pj_q[rloc] = QuantizeSrq(outv, p.pj_in_s);
        if (DJ != 0) pj_q[rloc] = QuantizeSrq(outv, p.next_in_s);
        y[t * p.y_stride + p.y_off + row] = outv;
        if (XQ == 2) {
          const uint q = uint(QuantizeSrq(outv, p.next_in_s)) & 0xFFu;
          uint w = row >> 2, b = row & 3;  // the consumer's column `row`: word w, byte b
          if (PERM == 4) {
            w = 2 * (row >> 3) + (row & 1);
            b = (row & 7) >> 1;
          } else if (PERM == 3) {
            w = 4 * (row >> 4) + (row & 3);
            b = (row & 15) >> 2;
          }
          atomicOr(xq_out[w], q << (8 * b));
        }
      }
    }
    if ((EPI == 4 || DJ != 0) && lane == 0 && row >= p.rows) pj_q[rloc] = 0;
    if (!in_regs) barrier();  // red_i / red_f are reused by the next block
#if DP4A
    if (EPI == 4) {
      // P's products over this block's columns: the quantized outputs packed as P's input words
      // (int8, natural order), one packed dot product per word, one atomic per row of P.
      barrier();  // pj_q complete
      uint qw[16];
      [[unroll]] for (uint k = 0; k < 16; ++k) {
        qw[k] = 0u;
        if (k < PJW) {
          [[unroll]] for (uint b = 0; b < 4; ++b)
            qw[k] |= (uint(pj_q[4 * k + b]) & 0xFFu) << (8 * b);
        }
      }
      const uint c0w = blk * PJW;
      [[unroll]] for (uint r = 0; r < 8; ++r) {
        const uint j = tid + WG * r;
        if (j < p.pj_rows) {
          int a = 0;
          [[unroll]] for (uint k = 0; k < 16; ++k) {
            if (k >= PJW) break;
            const uint w = PJW <= 4 ? pw[r][k & 3]
                           : c0w + k < p.pj_wstride ? w1w[j * p.pj_wstride + c0w + k]
                                                    : 0u;
            a = SDot4(int(w), int(qw[k]), 0) + a;
          }
          atomicAdd(pacc[j], a);
        }
      }
      barrier();  // pj_q is rewritten by the next block
    }
    if (DJ != 0) {
      // D's products over this block's columns: the quantized outputs packed in D's packed-dot
      // lane order (word k, lane group g, byte b: column k * 4 DJG + b DJG + g), the weight lane
      // groups made as FAST's (64 / 16 times the codes, shifted back per block: exact).
      if ((DJM & 1) != 0) LoadDj(blk, dw);
      barrier();  // pj_q complete
      uint qx[2 * DJP][4];
      [[unroll]] for (uint k = 0; k < 2 * DJP; ++k) {
        [[unroll]] for (uint g = 0; g < 4; ++g) {
          qx[k][g] = 0u;
          if (g < DJG) {
            [[unroll]] for (uint b = 0; b < 4; ++b)
              qx[k][g] |= (uint(pj_q[k * 4 * DJG + b * DJG + g]) & 0xFFu) << (8 * b);
          }
        }
      }
      [[unroll]] for (uint r = 0; r < 8; ++r) {
        int a = 0;
        [[unroll]] for (uint k = 0; k < 2 * DJP; ++k) {
          const uint w = (k & 1) == 0 ? dw[r][k / 2].x : dw[r][k / 2].y;
          if (DJ == 3) {
            a = SDot4(int(((w << 6) & 0xC0C0C0C0u) ^ 0x80808080u), int(qx[k][0]), 0) + a;
            a = SDot4(int(((w << 4) & 0xC0C0C0C0u) ^ 0x80808080u), int(qx[k][1]), 0) + a;
            a = SDot4(int(((w << 2) & 0xC0C0C0C0u) ^ 0x80808080u), int(qx[k][2]), 0) + a;
            a = SDot4(int((w & 0xC0C0C0C0u) ^ 0x80808080u), int(qx[k][3]), 0) + a;
          } else {
            a = SDot4(int(((w << 4) & 0xF0F0F0F0u) ^ 0x80808080u), int(qx[k][0]), 0) + a;
            a = SDot4(int((w & 0xF0F0F0F0u) ^ 0x80808080u), int(qx[k][1]), 0) + a;
          }
        }
        dsum[r] += DJ == 3 ? a >> 6 : a >> 4;
      }
      barrier();  // pj_q is rewritten by the next block
    }
#endif
    if (KSPLIT > 0) {
      // The row block's last split finishes it (linear_cm_epi's operations).
      memoryBarrierBuffer();
      barrier();
      const uint ci = gl_WorkGroupID.x * nblk + blk;
      if (tid == 0) last_wg = atomicAdd(kcount[ci], 1u) == gl_NumWorkGroups.z - 1;
      barrier();
      if (last_wg) {
        memoryBarrierBuffer();
        for (uint i = tid; i < ROWS_PER_WG * TOK; i += WG) {
          const uint r2 = blk * ROWS_PER_WG + i % ROWS_PER_WG, t2 = tg + i / ROWS_PER_WG;
          if (r2 >= p.rows || t2 >= p.ntok) continue;
          const int sum = atomicExchange(ksum[t2 * p.rows + r2], 0);
          const float a = EPI == 3 ? aux[t2 * p.aux_stride + p.aux_off + r2] : 0.0;
          y[t2 * p.y_stride + p.y_off + r2] =
              SplitKOut(sum, p.in_s0, s0[r2], p.out_s0, EPI, p.cap, a);
        }
        if (tid == 0) kcount[ci] = 0;
      }
    }
    if (blk == gl_WorkGroupID.y) Probe(5);  // first block's epilogue done
  }
  if (DJ != 0) {
    [[unroll]] for (uint r = 0; r < 8; ++r) {
      const uint j = tid + WG * r;
      if (j < p.pj_rows && dsum[r] != 0)
        atomicAdd(pacc[(gl_WorkGroupID.y % ACC_COPIES) * p.pj_rows + j], dsum[r]);
    }
  }
  Probe(6);  // every block done
  if (TAIL == 1) ResidualNormTail();
  Probe(7);
  Probe2(7);  // the end (the only point of a linear without a prologue)
}
