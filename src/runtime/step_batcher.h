// Batched decode across sessions (continuous batching): sessions decoding at the same time hand
// their one-token steps to the engine's StepBatcher, which evaluates those pending together in one
// BackendModel::ForwardBatch (the weights read once for all of them). Sequences join and leave
// between steps; each gets the result it would have alone (BackendModel::ForwardBatch: bit for bit
// on the CPU backends).
//
// Flat combining, no scheduler thread: the first session to find no batch running runs one over
// every step pending (up to max_batch), the others wait for their results. Before running, it
// waits a little for the sessions that stepped in the previous batch and have not come back yet
// (they are choosing their next token), so batches stay whole instead of splitting in turns; the
// wait is bounded by a fraction of the last batch's time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "backend/backend.h"

namespace gemma {

class StepBatcher {
 public:
  StepBatcher(BackendModel& model, int max_batch) : model_(model), max_batch_(max_batch) {}

  // One step of `context` (a one-token request, or a verification step where the model's
  // batches_multi_token_steps()), batched with the steps of other contexts pending now; rethrows
  // this step's error. Returns the batch's size. The caller then counts as returning
  // soon with its next step until it calls Step again or Leave.
  int Step(Backend* context, const ForwardRequest& request, ForwardResult* result);
  // `context` will not step again soon (its generation ended, or it runs other work next).
  void Leave(Backend* context);

  // Calls Leave(context) when it goes out of scope, however the scope ends (no batcher: nothing).
  struct LeaveOnExit {
    StepBatcher* batcher;
    Backend* context;
    ~LeaveOnExit() {
      if (batcher) batcher->Leave(context);
    }
  };

  struct Stats {
    int64_t batches = 0, steps = 0;
    int max_size = 0;
  };
  Stats stats() const;

 private:
  struct Pending {
    BatchStep step;
    bool done = false;
    int batch = 0;  // the size of the batch it ran in
  };
  void RunBatch(std::unique_lock<std::mutex>& lock);

  BackendModel& model_;
  const int max_batch_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Pending*> queue_;
  std::vector<Backend*> returning_;  // stepped in a batch, not back yet
  bool running_ = false;
  std::chrono::steady_clock::duration last_batch_{};
  Stats stats_;
};

}  // namespace gemma
