// Perplexity of a token sequence under a model, scored on fixed windows (llama-perplexity's role,
// with the sliding-window scheme of transformers' perplexity guide).
//
// Window k starts at text token b = k * stride and holds <bos> followed by up to context - 1 text
// tokens; every text token is scored exactly once, in the first window that reaches past the
// previous window's end, from the logits at the position before it (the first window scores
// ids[0] from <bos> alone). So stride = context - 1 gives disjoint windows, and a smaller stride
// gives every scored token at least context - 1 - stride tokens of left context after the first
// window. tools/train/train_small.py implements the same windows in transformers for the goldens.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "backend/backend.h"

namespace gemma {

struct PerplexityOptions {
  int context = 512;  // tokens per window, <bos> included (>= 2, <= the backend's capacity)
  int stride = 0;     // text tokens between window starts, 1..context-1; 0 = context / 2
  int chunks = 0;     // stop after this many windows; 0 = all
  int32_t bos_id = 2;
};

struct PerplexityWindow {
  int begin = 0;   // first text token in the window
  int end = 0;     // one past the last text token in the window
  int scored = 0;  // tokens scored in this window: [end - scored, end)
  double nll = 0;  // their summed negative log-likelihood (natural log)
};

struct PerplexityReport {
  int text_tokens = 0;
  int tokens_scored = 0;
  double nll_sum = 0;
  double nll_mean = 0;
  double ppl = 0;         // exp(nll_mean)
  double ppl_stderr = 0;  // ppl * standard error of nll_mean over the scored tokens
  int context = 0, stride = 0;
  std::vector<PerplexityWindow> windows;
  // token_nll[i]: the NLL of text token ids[i], i < tokens_scored (for per-position comparisons
  // with a reference; 8 bytes per token).
  std::vector<double> token_nll;
};

// Scores `ids` (text tokens, no <bos>) with `backend`, which is reset before each window. Calls
// `progress` after each window with the report so far. Error(kInvalidArgument) for empty input or
// options out of range (named in the message).
PerplexityReport ComputePerplexity(
    Backend& backend, int vocab_size, std::span<const int32_t> ids,
    const PerplexityOptions& options,
    const std::function<void(const PerplexityReport&)>& progress = {});

}  // namespace gemma
