#include "runtime/step_batcher.h"

#include <algorithm>
#include <exception>

namespace gemma {

int StepBatcher::Step(Backend* context, const ForwardRequest& request, ForwardResult* result) {
  Pending p{.step = {.context = context, .request = request, .result = result}};
  std::unique_lock<std::mutex> lock(mutex_);
  std::erase(returning_, context);
  queue_.push_back(&p);
  cv_.notify_all();  // a leader waiting for returning sessions
  while (!p.done) {
    if (!running_) {
      RunBatch(lock);
    } else {
      cv_.wait(lock);
    }
  }
  if (p.step.error) std::rethrow_exception(p.step.error);
  return p.batch;
}

void StepBatcher::Leave(Backend* context) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase(returning_, context);
  cv_.notify_all();
}

void StepBatcher::RunBatch(std::unique_lock<std::mutex>& lock) {
  running_ = true;
  // Wait for the sessions of the last batch that are choosing their next token, at most a quarter
  // of that batch's time (50 us .. 5 ms): a session that takes longer joins the next batch.
  const auto limit = std::clamp<std::chrono::steady_clock::duration>(
      last_batch_ / 4, std::chrono::microseconds(50), std::chrono::milliseconds(5));
  const auto deadline = std::chrono::steady_clock::now() + limit;
  cv_.wait_until(lock, deadline, [&] {
    return returning_.empty() || static_cast<int>(queue_.size()) >= max_batch_;
  });
  const size_t n = std::min(queue_.size(), static_cast<size_t>(max_batch_));
  std::vector<Pending*> batch(queue_.begin(), queue_.begin() + n);
  queue_.erase(queue_.begin(), queue_.begin() + n);
  lock.unlock();
  std::vector<BatchStep> steps;
  steps.reserve(n);
  for (Pending* p : batch) steps.push_back(p->step);
  const auto start = std::chrono::steady_clock::now();
  if (steps.size() == 1) {
    try {
      steps[0].context->Forward(steps[0].request, steps[0].result);
    } catch (...) {
      steps[0].error = std::current_exception();
    }
  } else {
    try {
      model_.ForwardBatch(steps);
    } catch (...) {  // (ForwardBatch reports per step; anything else fails them all)
      for (BatchStep& s : steps)
        if (!s.error) s.error = std::current_exception();
    }
  }
  const auto took = std::chrono::steady_clock::now() - start;
  lock.lock();
  last_batch_ = took;
  // The batch's sessions count as returning from now on, not from when each thread wakes: a
  // session back first must not start the next batch without those still waking up.
  for (size_t i = 0; i < n; ++i) {
    batch[i]->step.error = steps[i].error;
    batch[i]->batch = static_cast<int>(n);
    batch[i]->done = true;
    returning_.push_back(batch[i]->step.context);
  }
  ++stats_.batches;
  stats_.steps += static_cast<int64_t>(n);
  stats_.max_size = std::max(stats_.max_size, static_cast<int>(n));
  running_ = false;
  cv_.notify_all();
}

StepBatcher::Stats StepBatcher::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace gemma
