#include "runtime/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "gemma/error.h"

namespace gemma {
namespace {

// Outputs are requested in pieces so that a large vocabulary (262,144 for E2B) never needs
// logits for a whole window at once.
constexpr int kLogitPiece = 64;

void Finish(PerplexityReport* r, double nll_sq_sum) {
  const int n = r->tokens_scored;
  r->nll_mean = n ? r->nll_sum / n : 0.0;
  r->ppl = std::exp(r->nll_mean);
  if (n > 1) {
    const double var = std::max(0.0, nll_sq_sum / n - r->nll_mean * r->nll_mean);
    r->ppl_stderr = r->ppl * std::sqrt(var / (n - 1));
  } else {
    r->ppl_stderr = 0;
  }
}

}  // namespace

PerplexityReport ComputePerplexity(Backend& backend, int vocab_size, std::span<const int32_t> ids,
                                   const PerplexityOptions& options,
                                   const std::function<void(const PerplexityReport&)>& progress) {
  const int n = static_cast<int>(ids.size());
  const int context = options.context;
  const int stride = options.stride == 0 ? context / 2 : options.stride;
  if (n == 0) throw Error(ErrorCode::kInvalidArgument, "perplexity: the text has no tokens");
  if (context < 2) {
    throw Error(ErrorCode::kInvalidArgument,
                "perplexity: context " + std::to_string(context) + " must be at least 2");
  }
  if (stride < 1 || stride > context - 1) {
    throw Error(ErrorCode::kInvalidArgument, "perplexity: stride " + std::to_string(stride) +
                                                 " must be in 1.." + std::to_string(context - 1) +
                                                 " for context " + std::to_string(context));
  }
  if (options.chunks < 0) {
    throw Error(ErrorCode::kInvalidArgument, "perplexity: chunks must be >= 0");
  }
  // The last text token of a window is never fed (its output predicts nothing scored here).
  if (context - 1 > backend.capacity()) {
    throw Error(ErrorCode::kInvalidArgument,
                "perplexity: context " + std::to_string(context) + " exceeds the backend's " +
                    std::to_string(backend.capacity()) + "-token capacity");
  }
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      throw Error(ErrorCode::kInvalidArgument,
                  "perplexity: token id " + std::to_string(id) + " outside the vocabulary");
    }
  }
  const int max_chunk = backend.capabilities().max_chunk;
  const int piece = max_chunk > 0 ? std::min(kLogitPiece, max_chunk) : kLogitPiece;

  PerplexityReport report;
  report.text_tokens = n;
  report.context = context;
  report.stride = stride;
  double nll_sq_sum = 0;
  int prev_end = 0;
  std::vector<int32_t> window;
  ForwardResult out;
  for (int begin = 0;; begin += stride) {
    const int end = std::min(begin + context - 1, n);
    // window[i] = <bos> for i = 0, else ids[begin + i - 1]; the output at i predicts ids[begin +
    // i].
    window.assign(1, options.bos_id);
    window.insert(window.end(), ids.begin() + begin, ids.begin() + end - 1);
    const int first_scored = prev_end - begin;  // window index whose output predicts ids[prev_end]
    backend.Reset();
    auto feed = [&](int from, int to, OutputMode mode) {
      for (int a = from; a < to; a += piece) {
        const int b = std::min(to, a + piece);
        backend.Forward({.tokens = std::span<const int32_t>(window).subspan(a, b - a),
                         .mode = mode,
                         .all_positions = mode == OutputMode::kLogits},
                        &out);
        if (mode != OutputMode::kLogits) continue;
        for (int i = a; i < b; ++i) {
          const float* row = out.logits.data() + static_cast<size_t>(i - a) * vocab_size;
          const float mx = *std::max_element(row, row + vocab_size);
          double sum = 0;
          for (int v = 0; v < vocab_size; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
          const double nll = mx + std::log(sum) - row[ids[begin + i]];
          report.nll_sum += nll;
          report.token_nll.push_back(nll);
          nll_sq_sum += nll * nll;
          report.windows.back().nll += nll;
        }
      }
    };
    report.windows.push_back({.begin = begin, .end = end, .scored = end - prev_end});
    feed(0, first_scored, OutputMode::kNone);
    feed(first_scored, end - begin, OutputMode::kLogits);
    report.tokens_scored += end - prev_end;
    prev_end = end;
    Finish(&report, nll_sq_sum);
    if (progress) progress(report);
    if (end == n) break;
    if (options.chunks > 0 && static_cast<int>(report.windows.size()) >= options.chunks) break;
  }
  return report;
}

}  // namespace gemma
