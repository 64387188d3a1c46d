// The harness end to end on a tiny golden model: rows, reference check, reports.
#include "bench/harness/bench_harness.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "gemma/error.h"

namespace gemma::bench {
namespace {

TEST(BenchHarness, StatsAndWorkloadSpecs) {
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 2, 3}), 2.5);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(P95(v), 95);
  EXPECT_EQ(P95({7}), 7);
  EXPECT_EQ(ParseWorkload("pp128+tg32").Name(), "pp128+tg32");
  const Workload mt = ParseWorkload("mt64+16+tg8");
  EXPECT_EQ(mt.kind, WorkloadKind::kMultiTurn);
  EXPECT_EQ(mt.turn2, 16);
  EXPECT_EQ(ParseWorkload("sel10+tg4").kind, WorkloadKind::kSelect);
  EXPECT_EQ(ParseWorkload("spec12+tg9").kind, WorkloadKind::kSpeculative);
  EXPECT_EQ(ParseWorkload("spec12+tg9").Name(), "spec12+tg9");
  for (const char* bad : {"pp+tg3", "pp3", "xx3+tg3", "pp0+tg1", "mt3+tg3", "pp3+tg-1"})
    EXPECT_THROW(ParseWorkload(bad), Error) << bad;
  EXPECT_EQ(PromptIds(5, 100, 1), PromptIds(5, 100, 1));
  for (int32_t id : PromptIds(50, 10, 2)) EXPECT_TRUE(id >= 3 && id < 10);
}

TEST(BenchHarness, RunsWorkloadsChecksReferenceAndWritesReports) {
  BenchOptions o;
  o.model = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/tiny_qat";
  o.backends = {"cpu-fast", "cpu-reference"};
  o.workloads = {ParseWorkload("pp6+tg4"), ParseWorkload("mt5+3+tg3"), ParseWorkload("sel4+tg3")};
  o.warmup = 1;
  o.reps = 2;
  o.threads = 2;
  o.capacity = 64;
  o.bandwidth_bytes = 8 << 20;
  std::vector<std::string> log;
  const Report r = RunBench(o, [&](const std::string& s) { log.push_back(s); });
  ASSERT_EQ(r.rows.size(), 2u * 3u * 2u);  // backends x workloads x {cold, warm}
  EXPECT_GT(r.bandwidth.read_gbps, 0);
  EXPECT_GT(r.floor_ms, 0);
  for (const Row& row : r.rows) {
    ASSERT_TRUE(row.matched.has_value()) << row.backend << " " << row.workload;
    EXPECT_TRUE(*row.matched) << row.backend << " " << row.workload;
    EXPECT_GT(row.ttft_ms, 0);
    EXPECT_EQ(row.reps, row.mode == "warm" ? 2 : 1);
    if (row.workload != "sel4+tg3") {
      ASSERT_TRUE(row.logits_rel_l2.has_value()) << row.backend << " " << row.workload;
      EXPECT_LE(*row.logits_rel_l2, 1e-4);
    }
  }
  EXPECT_EQ(r.rows[0].tokens.size(), 4u);
  EXPECT_EQ(r.rows[2].tokens.size(), 6u);  // two turns of 3
  EXPECT_EQ(r.rows[1].itl_series_ms.size(), 3u);

  const nlohmann::json j = nlohmann::json::parse(ToJson(r));
  EXPECT_EQ(j["rows"].size(), r.rows.size());
  EXPECT_EQ(j["rows"][0]["matched_reference"], true);
  const std::string csv = ToCsv(r);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), static_cast<long>(r.rows.size()) + 1);
  EXPECT_NE(ToMarkdown(r).find("| cpu-fast | pp6+tg4 | warm |"), std::string::npos);
  const std::string html = ToHtml(r);
  EXPECT_NE(html.find("<polyline"), std::string::npos);
  EXPECT_NE(html.find("<rect"), std::string::npos);
}

TEST(BenchHarness, MismatchedRowsAreFlaggedAndLeftOutOfSummaries) {
  Report r;
  Row good, bad;
  good.backend = bad.backend = "cpu-fast";
  good.mode = bad.mode = "warm";
  good.workload = "pp1+tg2";
  bad.workload = "pp2+tg2";
  good.decode_tok_s = 10;
  bad.decode_tok_s = 1000;
  good.matched = true;
  bad.matched = false;
  bad.itl_series_ms = {1, 2};
  r.rows = {good, bad};
  const std::string md = ToMarkdown(r);
  EXPECT_NE(md.find("NO (flagged)"), std::string::npos);
  EXPECT_NE(md.find("decode 10.00 tok/s"), std::string::npos);
  EXPECT_NE(md.find("1 flagged row(s) excluded"), std::string::npos);
  EXPECT_EQ(ToHtml(r).find("<polyline"), std::string::npos);
}

// A speculative workload: plain decoding checked against the reference, then drafts right, wrong
// and half right by construction, each row with plain decoding's tokens and the acceptance its
// construction implies.
TEST(BenchHarness, SpeculativeRowsPerDraftSource) {
  BenchOptions o;
  o.model = std::string(GEMMA_SOURCE_DIR) + "/tests/goldens/model/tiny_qat";
  o.backends = {"cpu-fast"};
  o.workloads = {ParseWorkload("spec7+tg24")};
  o.warmup = 0;
  o.reps = 1;
  o.threads = 2;
  o.capacity = 64;
  o.bandwidth_bytes = 8 << 20;
  const Report r = RunBench(o, [](const std::string&) {});
  ASSERT_EQ(r.rows.size(), 5u);  // off, right, wrong, half, prompt-lookup
  std::map<std::string, const Row*> by;
  for (const Row& row : r.rows) {
    by[row.draft] = &row;
    EXPECT_EQ(row.mode, "warm");
    ASSERT_TRUE(row.matched.has_value()) << row.draft;
    EXPECT_TRUE(*row.matched) << row.draft << ": " << row.note;
    EXPECT_EQ(row.tokens.size(), 24u);
    EXPECT_EQ(row.itl_series_ms.size(), 23u);
    EXPECT_GT(row.decode_tok_s, 0);
  }
  ASSERT_EQ(by.size(), 5u);
  EXPECT_EQ(by["off"]->drafted, 0);
  EXPECT_EQ(by["off"]->speedup_vs_plain, 1.0);
  EXPECT_GT(by["right"]->drafted, 0);
  EXPECT_EQ(by["right"]->accepted, by["right"]->drafted);
  // (drafts lengthen from one token to four: a ramp of three steps, then 5 tokens a step)
  EXPECT_LE(by["right"]->verify_steps, (24 + 4) / 5 + 3);
  EXPECT_GT(by["right"]->drafted, 2 * by["right"]->verify_steps);
  EXPECT_GT(by["wrong"]->drafted, 0);
  EXPECT_EQ(by["wrong"]->accepted, 0);
  EXPECT_GT(by["half"]->accepted, 0);
  EXPECT_LT(by["half"]->accepted, by["half"]->drafted);
  const std::string md = ToMarkdown(r);
  EXPECT_NE(md.find("| cpu-fast | spec7+tg24 | right |"), std::string::npos) << md;
  const nlohmann::json j = nlohmann::json::parse(ToJson(r));
  EXPECT_EQ(j["rows"][1]["draft"], "right");
  o.drafts = {"sometimes"};
  EXPECT_THROW(RunBench(o, [](const std::string&) {}), Error);
}

}  // namespace
}  // namespace gemma::bench
