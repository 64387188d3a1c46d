// Drafts for speculative decoding: tokens guessed ahead of the model, which one backend step then
// verifies (every drafted position's output at once). Greedy decoding keeps exactly the tokens it
// would have produced alone: a draft token is kept only where it equals the model's own choice.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace gemma::decode {

// Where drafts come from (prompt lookup here; a small draft model can implement the same).
class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Up to k tokens likely to follow `history` (the prompt and the tokens generated so far, the
  // last one included); empty when there is no guess.
  virtual std::vector<int32_t> Propose(std::span<const int32_t> history, int k) = 0;
};

// Prompt lookup: the longest suffix of the history (max_ngram tokens down to min_ngram) that
// occurred earlier, and the tokens that followed its most recent earlier occurrence. Strong where
// the output repeats its input: code edits, quotes, retrieved passages, echoed JSON.
class PromptLookupDraft : public DraftSource {
 public:
  explicit PromptLookupDraft(int max_ngram = 3, int min_ngram = 1)
      : max_ngram_(max_ngram), min_ngram_(min_ngram) {}
  std::vector<int32_t> Propose(std::span<const int32_t> history, int k) override;

 private:
  int max_ngram_, min_ngram_;
};

// How many tokens to draft, from what drafts have been worth so far. A verification step of k
// drafts gives 1 + (the accepted ones) tokens and costs C(k) plain steps (the backend's measured
// step times: the lower median of each kind's last 8, so a first verification step that also
// built a GPU's pipelines does not count for long). With a per-token acceptance a (each drafted
// token right with probability a once those before it were: a decayed count of accepted tokens
// against rejections), k drafts are worth G(k) = (1 + a + ... + a^k) / C(k) plain steps per plain
// step; the policy drafts the k in 1..max_draft with the largest G, and none while even that is
// below 1 (drafts do not pay). C(k) is k's own measurement once it has two samples, else
// 1 + b k with b from the nearest measured length (a quarter before any): a step whose cost grows
// stepwise with its tokens (the CPU's 4-token tiles) is found by trying the lengths next to the
// chosen one now and then. Costs are in plain steps, so they count once a plain step has been
// timed (while every step is a verification step, the defaults decide: drafts lengthen with the
// acceptance; taking one plain step to time it made the choice follow that single sample's noise:
// bench/journal/2026-12-05-speculative-bench.md). After a pause one token is drafted (a
// probe: a two-token step, little dearer than a plain one): drafting resumes when it is accepted,
// else the next pause is twice as long (16, 32, ... 256 plain steps), so drafts that stay wrong
// cost a few percent of plain decoding over a long generation, and drafts that become right again
// (the output starts quoting) are found.
class DraftPolicy {
 public:
  static constexpr int kMaxDraft = 8;
  explicit DraftPolicy(int max_draft) : max_draft_(std::min(max_draft, kMaxDraft)) {}
  // Tokens to draft for the next step (0: decode one token plainly).
  int Next();
  // A verification step's outcome.
  void Record(int drafted, int accepted);
  // The wall time of a plain one-token step, and of a verification step of `drafted` drafts (a
  // probe's is not kept).
  void RecordPlainCost(double seconds);
  void RecordVerifyCost(int drafted, double seconds);
  // The estimated per-token acceptance, the cost of a k-draft step in plain steps and its worth
  // G(k) (above).
  double acceptance() const { return accepted_ / (accepted_ + rejected_); }
  double Cost(int k) const;
  double Gain(int k) const;

 private:
  static constexpr int kMinPause = 16, kMaxPause = 256;
  void Pause();
  int Best() const;  // the k with the largest gain

  int max_draft_;
  // Decayed counts (x 0.8 per verification step) of accepted drafted tokens and of steps that
  // rejected one; a start of one each (a = 1/2).
  double accepted_ = 1, rejected_ = 1;
  int pause_ = 0;            // plain steps left before drafting again
  int backoff_ = kMinPause;  // the next pause's length
  bool probing_ = false;     // the next draft is a one-token probe
  int steps_ = 0;            // verification steps recorded
  // The last samples of the steps' costs (a ring each): plain steps, verification steps by drafts.
  struct Window {
    static constexpr int kSize = 8;
    double v[kSize] = {};
    int n = 0;  // samples so far
    void Add(double x) { v[n++ % kSize] = x; }
    double LowerMedian() const;  // 0 when empty
  };
  Window plain_s_, verify_s_[kMaxDraft + 1];
};

}  // namespace gemma::decode
