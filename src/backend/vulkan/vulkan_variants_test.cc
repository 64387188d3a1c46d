// Tables of kernel choices (decode attention, one-token step variants) against the CPU reference
// and the default step, as contexts on one shared device per model.
#include "backend/vulkan/vulkan_test_util.h"

namespace gemma {
namespace {

// One-token steps past the sliding window (ring wrap, several key splits), logits against the CPU
// reference at every step: the fused one-token attention (attn_fused.comp, opt-in since issue 34:
// GEMMA_VULKAN_ATTN_FUSED=1) with its
// q/k norm + RoPE inside or in qkrope's dispatch, one or several key blocks per split, merged by
// the last split (the default: arrival by one acquire-release atomic, partials read through the
// non-coherent alias; or full barriers, coherent loads) or by a second dispatch (MODE 1), scalar
// or 16-byte cache loads; the three-kernel path (the default: qkrope +
// attention.comp + attn_combine). Slack 8 gives the sliding layers a
// ring shorter than a key block (rows by division), slack 40 one that holds attention.comp's
// 32-key block (rows by one wrap from the block's first row). Fixtures: one K/V head of dim 32,
// two of dim 24 (KV sharing in both).
const std::vector<Knobs> kDecodeAttentionKnobs = {
    {},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"}},  // several splits hold keys: the merge runs
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_SPLITS", "2"}},  // several blocks a split
    // ... with the next block's V rows loaded after this block's sums (VPF off; the default
    // loads them with the next block's K rows), and the default with scalar loads
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_SPLITS", "2"},
     {"GEMMA_VULKAN_ATTN_VPF", "0"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_SPLITS", "2"},
     {"GEMMA_VULKAN_ATTN_VEC", "0"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_FUSED_MODE", "1"}},  // merge dispatch
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "2"},
     {"GEMMA_VULKAN_ATTN_FUSED_ROPE", "0"}},
    // 16-byte loads (a lane holds 8 of dim 32's values on 4 lanes per row) and scalar ones
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_VEC", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_VEC", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"},
     {"GEMMA_VULKAN_ATTN_KW", "1"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_FUSED_MODE", "1"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_VEC", "0"},
     {"GEMMA_VULKAN_ATTN_RL", "4"}},
    // the last split merges after full memory barriers around a relaxed arrival count, reading
    // the partials through the coherent binding
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_FENCE", "0"},
     {"GEMMA_VULKAN_ATTN_NC_MERGE", "0"}},
    // ... after the acquire-release atomic, coherent loads
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_NC_MERGE", "0"}},
    // ... after the full barriers, the non-coherent alias
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_ATTN_FENCE", "0"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_RL", "4"},
     {"GEMMA_VULKAN_ATTN_KW", "1"}},
    // two query heads per workgroup in the full-attention layers (HPW) from position 40 (the
    // one-token steps switch command buffers there), and from the start with several blocks a
    // split
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"}, {"GEMMA_VULKAN_ATTN_HPW_FROM", "40"}},
    {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"},
     {"GEMMA_VULKAN_SPLITS", "2"},
     {"GEMMA_VULKAN_ATTN_HPW_FROM", "0"}},
};

// One test per variant (the NVIDIA driver refuses Vulkan instances after ~30 in a process).
class DecodeAttentionVariants : public ::testing::TestWithParam<size_t> {};
INSTANTIATE_TEST_SUITE_P(Knobs, DecodeAttentionVariants,
                         ::testing::Range(size_t(0), kDecodeAttentionKnobs.size()));

TEST_P(DecodeAttentionVariants, MatchReference) {
  const Knobs& env = kDecodeAttentionKnobs[GetParam()];
  for (const char* fixture : {"tiny_dense_bf16", "tiny_e4b_like_f16"})
    for (const int slack : {8, 40}) {
      SCOPED_TRACE(std::string(fixture) + " slack " + std::to_string(slack) + KnobsText(env));
      auto model = LoadFixture(fixture);
      const int V = model->text().vocab_size;
      auto vk = MakeVulkanWith(*model, env, {.capacity = 128, .slack = slack});
      if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
      auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 128, .slack = slack});
      std::vector<int32_t> tokens(100);
      for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 53 + 5) % V);
      ASSERT_NO_FATAL_FAILURE(ExpectStepsMatchCpu(*vk, *cpu, tokens, 8, V));
    }
}

// A sliding window longer than a key block (tiny's structure, window 100, a ring of 108): with
// one or two key splits (ATTN_KW=1: 16- or 32-key blocks) a split's keys span several blocks
// whose ring rows wrap (attn_fused advances a block's ring row by a compare), and the new key is
// taken before the key loop; logits against the CPU reference at every one-token step past the
// wrap.
TEST(VulkanKernels, FusedAttentionSlidingWindowOverSeveralBlocks) {
  const SynthModel synth(
      {.preset = "tiny",
       .out_dir = testing::TempDir() + "/gemma_vulkan_tiny_window_" + std::to_string(getpid()),
       .seed = 3,
       .sliding_window = 100});
  const Model* model = synth.model.get();
  ASSERT_EQ(model->text().sliding_window, 100);
  const int V = model->text().vocab_size;
  const BackendOptions opt = {.capacity = 160, .slack = 8};
  std::vector<int32_t> tokens(132);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919 + 3) % V);
  for (const Knobs& env : std::vector<Knobs>{{{"GEMMA_VULKAN_ATTN_FUSED", "1"},
                                              {"GEMMA_VULKAN_ATTN_KW", "1"},
                                              {"GEMMA_VULKAN_ATTN_FUSED_SPLITS", "1"}},
                                             {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
                                              {"GEMMA_VULKAN_ATTN_KW", "1"},
                                              {"GEMMA_VULKAN_ATTN_FUSED_SPLITS", "2"}},
                                             {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
                                              {"GEMMA_VULKAN_ATTN_KW", "1"},
                                              {"GEMMA_VULKAN_ATTN_FUSED_SPLITS", "2"},
                                              {"GEMMA_VULKAN_ATTN_VPF", "0"}}}) {
    SCOPED_TRACE(KnobsText(env));
    auto vk = MakeVulkanWith(*model, env, opt);
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    auto cpu = CreateCpuReferenceBackend(*model, opt);
    ASSERT_NO_FATAL_FAILURE(ExpectStepsMatchCpu(*vk, *cpu, tokens, 96, V));
  }
}

// The fused attention's merge in several rounds (each invocation loads the first ATTN_MB partials
// before the split weights are known, the rest ATTN_MB a round after), in the last split's
// workgroup (MODE 0: the default, arrival by one acquire-release atomic and the partials read
// through the non-coherent alias; full barriers and coherent loads) and in the merge dispatch
// (MODE 1): 64 splits of one key block (ATTN_KW=1: 32 keys on 8-wide subgroups, 16 on 32-wide)
// and 4 partials a round give a full-attention layer 3 to 8 rounds at 300-500 positions.
TEST(VulkanKernels, FusedAttentionMergesManySplits) {
  const std::vector<Knobs> merges = {
      {},
      {{"GEMMA_VULKAN_ATTN_FENCE", "0"}},
      {{"GEMMA_VULKAN_ATTN_NC_MERGE", "0"}},
      {{"GEMMA_VULKAN_ATTN_FENCE", "0"}, {"GEMMA_VULKAN_ATTN_NC_MERGE", "0"}},
      {{"GEMMA_VULKAN_ATTN_FUSED_MODE", "1"}},
      {{"GEMMA_VULKAN_ATTN_HPW_FROM", "0"}}};  // the last split merges both of its heads
  for (const Knobs& merge : merges) {
    Knobs env = {{"GEMMA_VULKAN_ATTN_FUSED", "1"},
                 {"GEMMA_VULKAN_ATTN_KW", "1"},
                 {"GEMMA_VULKAN_ATTN_MB", "4"},
                 {"GEMMA_VULKAN_SPLITS", "64"}};
    env.insert(env.end(), merge.begin(), merge.end());
    SCOPED_TRACE(KnobsText(env));
    auto model = LoadFixture("tiny_dense_bf16");
    const int V = model->text().vocab_size;
    auto vk = MakeVulkanWith(*model, env, {.capacity = 512});
    if (!vk) GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
    auto cpu = CreateCpuReferenceBackend(*model, {.capacity = 512});
    std::vector<int32_t> tokens(500);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 37 + 11) % V);
    ASSERT_NO_FATAL_FAILURE(ExpectStepsMatchCpu(*vk, *cpu, tokens, 300, V));
  }
}

// One-token-step fusions against the default step and the CPU reference: the residual norms
// applied in the next linear's prologue (GEMMA_VULKAN_CNORM=1, linear.comp PRO; the residual
// stream alternates between two buffers). Logits of every decoded position past the sliding window (two key splits on
// lavapipe), with weights whole and split by rows (several dispatches per linear, one writes the
// residual), and the prompt's trailing-layer pass (which ends on a one-token body).
// Opt-in one-token variants, each against the default step and the CPU reference. MV_WGS 3: the
// one-token linears on three workgroups, each looping over many row blocks. One test per variant
// (the NVIDIA driver refuses Vulkan instances after ~30 in a process).
const std::vector<Knobs> kOneTokenKnobs = {
    {{"GEMMA_VULKAN_CNORM", "1"}},
    {{"GEMMA_VULKAN_MV_WGS", "3"}},
    {{"GEMMA_VULKAN_MV_WGS", "3"}, {"GEMMA_VULKAN_CNORM", "1"}},
    {{"GEMMA_VULKAN_MV_WGS", "3"},
     {"GEMMA_VULKAN_MV_MAX_ROWS", "64"},
     {"GEMMA_VULKAN_MV_WGS_LONG", "2"}},
    {{"GEMMA_VULKAN_MV_LANES", "4"}},
    {{"GEMMA_VULKAN_MV_LANES", "8"},
     {"GEMMA_VULKAN_MV_LANES_VEC", "1"},
     {"GEMMA_VULKAN_MV_WGS", "3"}},
    {{"GEMMA_VULKAN_XQ_PERM", "0"}},
    {{"GEMMA_VULKAN_XQ_PERM", "0"}, {"GEMMA_VULKAN_CNORM", "0"}},
    {{"GEMMA_VULKAN_SPLITS_ADAPT", "1"},
     {"GEMMA_VULKAN_SPLITS", "64"},
     {"GEMMA_VULKAN_ATTN_FUSED", "0"}},
    {{"GEMMA_VULKAN_SPLITS", "64"},
     {"GEMMA_VULKAN_ATTN_FUSED", "1"},
     {"GEMMA_VULKAN_ATTN_KW", "1"}},  // fused attention, merged splits
    {{"GEMMA_VULKAN_PACK_ATOMIC", "1"}},
    {{"GEMMA_VULKAN_RMS_ALL", "1"}},
    {{"GEMMA_VULKAN_RMS_ALL", "1"}, {"GEMMA_VULKAN_MV_WGS", "3"}},
    {{"GEMMA_VULKAN_PRO_VEC", "0"}},
    {{"GEMMA_VULKAN_PRO_VEC", "0"}, {"GEMMA_VULKAN_MV_WGS", "3"}},
    // the first block's weights loaded at every FAST single-set linear's start (PFE), with a
    // loop over blocks too, and nowhere
    {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "100000"}, {"GEMMA_VULKAN_MV_PREFETCH_EARLY_SET", "7"}},
    {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "100000"},
     {"GEMMA_VULKAN_MV_PREFETCH_EARLY_SET", "7"},
     {"GEMMA_VULKAN_MV_WGS", "3"}},
    {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "0"}},
    // the early loads before the prologues' operand loads (the default: after them, PFE_LATE)
    {{"GEMMA_VULKAN_MV_PREFETCH_EARLY", "100000"},
     {"GEMMA_VULKAN_MV_PREFETCH_EARLY_SET", "7"},
     {"GEMMA_VULKAN_MV_PREFETCH_EARLY_LATE", "0"}},
    // the prologues' RMS factors by the double division and square root (the default: Newton
    // steps), gate/up's input quantized for each set (the default: once where the scales agree)
    {{"GEMMA_VULKAN_RMS_FAST", "0"}, {"GEMMA_VULKAN_SHARE_X", "0"}},
    // the PLE projection as its own dispatch (the default: summed by the gate's workgroups, EPI
    // 4, in 4-row blocks: one projection word per row, loaded before the gate's multiply); the
    // gate's general lane choice (64-row blocks on the fixtures: the words loaded after the
    // multiply) and 16-row blocks (four words)
    {{"GEMMA_VULKAN_PLE_FUSE", "0"}},
    {{"GEMMA_VULKAN_PLE_LANES", "0"}},
    {{"GEMMA_VULKAN_PLE_LANES", "16"}},
    // the down projection as its own dispatch (the default: summed by gate/up's workgroups, DJ),
    // summed by three workgroups looping over gate/up's row blocks, and with its words read
    // from the matrix before the multiply into one copy of the sums
    {{"GEMMA_VULKAN_DOWN_FUSE", "0"}},
    {{"GEMMA_VULKAN_DOWN_FUSE_WGS", "3"}},
    {{"GEMMA_VULKAN_DOWN_FUSE_PAIRS", "0"},
     {"GEMMA_VULKAN_DOWN_FUSE_LATE", "0"},
     {"GEMMA_VULKAN_DOWN_FUSE_COPIES", "1"}},
    // the next row block's weights loaded before a block's multiply where workgroups loop over
    // several (the default; the LM head on three workgroups), and not
    {{"GEMMA_VULKAN_MV_WGS", "3"}, {"GEMMA_VULKAN_MV_PREFETCH_BLOCK", "1"}},
    {{"GEMMA_VULKAN_MV_WGS", "3"}, {"GEMMA_VULKAN_MV_PREFETCH_BLOCK", "0"}}};

class OneTokenVariants : public ::testing::TestWithParam<size_t> {};
INSTANTIATE_TEST_SUITE_P(Knobs, OneTokenVariants,
                         ::testing::Range(size_t(0), kOneTokenKnobs.size()));

TEST_P(OneTokenVariants, MatchDefaultStep) {
  const Knobs& env = kOneTokenKnobs[GetParam()];
  for (const char* fixture : {"tiny_qat", "tiny_dense_bf16", "tiny_e4b_like_f16"}) {
    for (size_t part : {size_t(0), size_t(1024)}) {
      std::string trace = std::string(fixture) + " part " + std::to_string(part);
      for (const auto& [k, v] : env) trace += std::string(" ") + k + "=" + v;
      SCOPED_TRACE(trace);
      auto model = LoadFixture(fixture);
      const int V = model->text().vocab_size;
      const BackendOptions opt{.capacity = 96, .slack = 16};
      std::unique_ptr<Backend> tails, cnorm;
      try {
        SetKnob("GEMMA_VULKAN_CNORM", "0");  // the baseline: norm tails, a workgroup per block
        SetKnob("GEMMA_VULKAN_MV_WGS", "0");
        tails = CreateVulkanBackend(*model, opt, {.max_weight_part_bytes = part});
        ClearKnob("GEMMA_VULKAN_CNORM");
        ClearKnob("GEMMA_VULKAN_MV_WGS");
        for (const auto& [k, v] : env) SetKnob(k, v);
        cnorm = CreateVulkanBackend(*model, opt, {.max_weight_part_bytes = part});
        for (const auto& [k, v] : env) ClearKnob(k);
      } catch (const Error& e) {
        for (const auto& [k, v] : env) ClearKnob(k);
        if (e.code() != ErrorCode::kDevice) throw;
        GTEST_SKIP() << "SKIPPED: no usable Vulkan device on this machine";
      }
      auto cpu = CreateCpuReferenceBackend(*model, opt);
      std::vector<int32_t> tokens(part ? 30 : 50);
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = static_cast<int32_t>((i * 37 + 11) % V);
      const std::span<const int32_t> prompt(tokens.data(), 12);
      ForwardResult a, b, c;
      for (size_t t = 12; t <= tokens.size(); ++t) {
        const std::span<const int32_t> in =
            t == 12 ? prompt : std::span<const int32_t>(&tokens[t - 1], 1);
        tails->Forward({.tokens = in, .mode = OutputMode::kLogits}, &a);
        cnorm->Forward({.tokens = in, .mode = OutputMode::kLogits}, &b);
        cpu->Forward({.tokens = in, .mode = OutputMode::kLogits}, &c);
        ASSERT_EQ(b.logits.size(), size_t(V));
        EXPECT_LT(RelL2(b.logits.data(), c.logits.data(), V), 1e-4) << "position " << t;
        EXPECT_LT(RelL2(b.logits.data(), a.logits.data(), V), 1e-4) << "position " << t;
      }
    }
  }
}

}  // namespace
}  // namespace gemma
