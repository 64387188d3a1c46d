// A fixed pool of worker threads for data-parallel loops (matrix rows, attention heads, tokens).
//
// Run() hands out task indices [0, tasks) through one atomic word holding the job's epoch, its task
// count and the next index, so a claim is checked against the job it was read from: a worker that
// wakes late for a finished job claims nothing, even while the next job is being set up; the
// calling thread works too and Run() returns when every task is done, not when every worker has
// looked. A pool of size N has N - 1 workers. Workers spin briefly after each job (a decode step
// issues hundreds of short jobs back to back), then sleep on an atomic wait; waiters yield so an
// oversubscribed machine still makes progress. Run() never allocates.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace gemma {

class ThreadPool {
 public:
  // threads <= 0: one per hardware thread.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that execute tasks, the caller included.
  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(task, thread) for every task in [0, tasks) and returns when all are done; `thread` is
  // in [0, size()) and unique among concurrently running calls (index per-thread scratch with it).
  // Not reentrant: fn must not call Run on the same pool. tasks < 2^20.
  template <class Fn>
  void Run(int tasks, const Fn& fn) {
    if (tasks <= 0) return;
    if (tasks == 1 || workers_.empty()) {
      for (int t = 0; t < tasks; ++t) fn(t, 0);
      return;
    }
    RunErased(tasks, &fn, [](const void* f, int task, int thread) {
      (*static_cast<const Fn*>(f))(task, thread);
    });
  }

 private:
  using Call = void (*)(const void*, int, int);
  void RunErased(int tasks, const void* fn, Call call);
  void WorkerLoop(int thread);
  void Drain(uint32_t epoch, int thread);

  std::vector<std::thread> workers_;
  // Job state, written before the job's epoch is published in word_.
  const void* fn_ = nullptr;
  Call call_ = nullptr;
  std::atomic<uint64_t> word_{0};  // epoch << 40 | tasks << 20 | next task index
  std::atomic<int> done_{0};       // tasks finished in the current job
  std::atomic<bool> stop_{false};
};

}  // namespace gemma
