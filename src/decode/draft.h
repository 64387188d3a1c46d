// Drafts for speculative decoding: tokens guessed ahead of the model, which one backend step then
// verifies (every drafted position's output at once). Greedy decoding keeps exactly the tokens it
// would have produced alone: a draft token is kept only where it equals the model's own choice.
#pragma once

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

// How many tokens to draft: `max_draft` while drafts are accepted, none for a while when they are
// not (a verification step costs more than a one-token step, so low acceptance would slow
// decoding down). After a pause one token is drafted (a probe: a two-token step, little dearer
// than a plain one); drafting resumes when it is accepted, else the next pause is twice as long
// (16, 32, ... 256 plain steps), so drafts that stay wrong cost a few percent of plain decoding
// over a long generation and drafts that become right again (the output starts quoting) are
// found. Acceptance is tracked as a moving average of accepted / drafted per step; the
// share below which drafting loses comes from the measured costs of the backend's steps once both
// kinds have been timed (a verification step of k drafts gives 1 + accepted tokens, a plain step
// one: break-even at (verify / plain - 1) / k accepted), else a quarter. The costs are the lower
// medians of each kind's last 8 samples: a step that also built pipelines or waited on the machine
// (seconds, on a GPU's first verification step) moves them only while it is most of the window.
class DraftPolicy {
 public:
  explicit DraftPolicy(int max_draft) : max_draft_(max_draft) {}
  // Tokens to draft for the next step (0: decode one token plainly).
  int Next();
  // A verification step's outcome.
  void Record(int drafted, int accepted);
  // The wall time of a plain one-token step, and of a verification step of `drafted` drafts (a
  // probe's is not kept: the break-even share is that of full drafts).
  void RecordPlainCost(double seconds);
  void RecordVerifyCost(int drafted, double seconds);
  // The accepted share below which drafting pauses.
  double threshold() const;

 private:
  static constexpr int kMinPause = 16, kMaxPause = 256;
  void Pause();

  int max_draft_;
  double rate_ = 0.5;  // moving average of accepted / drafted (a neutral start)
  int pause_ = 0;      // plain steps left before drafting again
  int backoff_ = kMinPause;  // the next pause's length
  bool probing_ = false;     // the next draft is a one-token probe
  int steps_ = 0;
  // The last samples of the steps' costs and of the drafts per verification (a ring each).
  struct Window {
    static constexpr int kSize = 8;
    double v[kSize] = {};
    int n = 0;  // samples so far
    void Add(double x) { v[n++ % kSize] = x; }
    double LowerMedian() const;  // 0 when empty
  };
  Window plain_s_, verify_s_, verify_k_;
};

}  // namespace gemma::decode
