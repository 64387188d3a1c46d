#include "server/openai_run.h"

#include <algorithm>

#include "server/api_error.h"

namespace gemma::server {
namespace {

double SumLogprob(const Result& r) {
  double s = 0;
  for (const TokenLogprob& lp : r.logprobs) s += lp.logprob;
  return s;
}

}  // namespace

std::vector<int32_t> PrepareRequest(ParsedRequest* pr, const Engine& engine,
                                    const char* prompt_field) {
  if (pr->stream && pr->best_of > pr->n)
    throw BadField("best_of", "cannot rank samples while streaming them; use stream: false");
  if ((pr->options.constraint.kind != OutputConstraint::Kind::kNone || pr->tools_given) &&
      !engine.has_tokenizer())
    throw ApiError(400, "constraints and tools need the model's tokenizer.json");
  std::vector<int32_t> prompt;
  try {
    prompt = engine.PromptTokens(pr->input);
  } catch (const Error& e) {
    throw FromEngineError(e);
  }
  const int64_t cap = engine.context_capacity();
  if (!prompt_field) prompt_field = pr->chat ? "messages" : "prompt";
  if (static_cast<int64_t>(prompt.size()) >= cap) {
    throw ApiError(400,
                   "the prompt has " + std::to_string(prompt.size()) +
                       " tokens; the context holds " + std::to_string(cap),
                   prompt_field, "context_length_exceeded");
  }
  if (pr->options.max_new_tokens == 0) {
    pr->options.max_new_tokens = static_cast<int>(cap - prompt.size());
  } else if (static_cast<int64_t>(prompt.size()) + pr->options.max_new_tokens > cap) {
    throw ApiError(400,
                   "prompt (" + std::to_string(prompt.size()) + " tokens) + max_tokens (" +
                       std::to_string(pr->options.max_new_tokens) + ") exceeds the context of " +
                       std::to_string(cap) + " tokens",
                   "max_tokens", "context_length_exceeded");
  }
  return prompt;
}

std::vector<Result> RunSamples(const ParsedRequest& pr, Session& s, std::stop_token stop,
                               StreamFormatter* fmt,
                               const std::function<void(std::string, bool)>& emit,
                               const std::function<void()>& on_accepted,
                               const std::function<void(const Result&)>& observe) {
  // The samples of n / best_of run one after another on this slot: each after the first reuses
  // the prompt's K/V. Spreading them over idle slots was measured not to pay on the CPU backends:
  // sessions there take turns on the one thread pool (4 and 8 concurrent streams on E2B QAT gave
  // 1.1x and 1.2x one stream's tok/s in aggregate, fewer on the tiny model), each extra slot would
  // evaluate the prompt again, and the request would take slots other clients are queued for.
  std::vector<Result> results;
  for (int i = 0; i < pr.best_of; ++i) {
    GenerateOptions o = pr.options;
    if (o.seed && i > 0) o.seed = *o.seed + i;  // n samples, each reproducible
    if (i == 0) o.on_accepted = on_accepted;
    TokenCallback cb;
    // The opening chunk (the role) leaves with the first token, in the same write.
    std::vector<json> opening;
    if (fmt) {
      opening = fmt->Begin(i);
      cb = [&](const TokenEvent& ev) {
        // One token's chunks (the opening one with the first) leave together: one wake-up of
        // the writer and one write, not one per chunk.
        std::string events;
        for (const json& c : opening) events += SseEvent(c);
        opening.clear();
        for (const json& c : fmt->Token(i, ev.delta, ev.logprob)) events += SseEvent(c);
        if (!events.empty()) emit(std::move(events), ev.index == 0);
      };
    }
    Result r = s.Generate(pr.input, o, cb, stop);
    if (observe) observe(r);
    if (fmt) {
      std::string events;
      for (const json& c : opening) events += SseEvent(c);
      for (const json& c : fmt->End(i, r)) events += SseEvent(c);
      emit(std::move(events), false);
    }
    results.push_back(std::move(r));
  }
  if (pr.best_of > pr.n) {
    std::stable_sort(results.begin(), results.end(), [](const Result& a, const Result& b) {
      return SumLogprob(a) > SumLogprob(b);
    });
    results.resize(pr.n);
  }
  return results;
}

}  // namespace gemma::server
