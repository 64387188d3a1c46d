// The runtime's step hand-off alone (not a test): B threads step through the StepBatcher as
// sessions do, against a stand-in model whose batched step is a fixed amount of busy work split
// into short thread-pool jobs (as a decode step's linears are), and against the same steps called
// directly. The difference per step is what the hand-off costs: waking the sessions, their
// bookkeeping, gathering the next batch. No weights, so it runs where the model does not fit.
// Prints the median wall ms per step both ways, the hand-off's share and its process CPU ms.
//   handoff_bench [--threads T] [--batch B] [--steps N] [--step-ms MS] [--jobs J] [--book-us US]
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "runtime/step_batcher.h"

namespace {

using Clock = std::chrono::steady_clock;

double ProcessCpuMs() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

// Busy work of a fixed amount, not of a fixed time: a thread preempted meanwhile finishes later,
// as a real step's does. Spin(n) takes ~n ns on an idle core (Calibrate).
double g_iters_per_ns = 1;
volatile uint64_t g_sink;
void Spin(int64_t ns) {
  uint64_t x = 1;
  const int64_t iters = static_cast<int64_t>(ns * g_iters_per_ns);
  for (int64_t i = 0; i < iters; ++i) x = x * 6364136223846793005ULL + 1442695040888963407ULL;
  g_sink = x;
}
void Calibrate() {
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    g_iters_per_ns = 1;
    const auto t0 = Clock::now();
    Spin(20'000'000);
    best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  g_iters_per_ns = 20'000'000 / best;
}
void Busy(Clock::duration d) {
  Spin(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}

// A step is `jobs` pool jobs of `threads` tasks each; every task busy for its share of step_ms.
class StandInModel;

class StandInContext : public gemma::Backend {
 public:
  explicit StandInContext(StandInModel& m) : model_(m) {}
  std::string name() const override { return "stand-in"; }
  gemma::BackendCapabilities capabilities() const override { return {}; }
  void Forward(const gemma::ForwardRequest& request, gemma::ForwardResult* result) override;
  int cached() const override { return 0; }
  int capacity() const override { return 1 << 20; }
  bool Truncate(int) override { return true; }
  void Reset() override {}
  size_t resident_bytes() const override { return 0; }

 private:
  StandInModel& model_;
};

class StandInModel : public gemma::BackendModel {
 public:
  StandInModel(int threads, double step_ms, int jobs)
      : pool_(threads),
        jobs_(jobs),
        task_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, std::milli>(step_ms / jobs))) {}
  std::string name() const override { return "stand-in"; }
  std::unique_ptr<gemma::Backend> NewContext(const gemma::BackendOptions&) override {
    return std::make_unique<StandInContext>(*this);
  }
  size_t shared_bytes() const override { return 0; }
  void ForwardBatch(std::span<gemma::BatchStep> steps) override {
    Work();
    for (gemma::BatchStep& s : steps) s.result->ids.assign(1, 7);
  }
  bool batches_steps() const override { return true; }
  void Work() {
    for (int j = 0; j < jobs_; ++j) pool_.Run(pool_.size(), [&](int, int) { Busy(task_); });
  }

 private:
  gemma::ThreadPool pool_;
  const int jobs_;
  const Clock::duration task_;
};

void StandInContext::Forward(const gemma::ForwardRequest&, gemma::ForwardResult* result) {
  model_.Work();
  result->ids.assign(1, 7);
}

struct Figure {
  double wall_ms = 0;  // median per step
  double cpu_ms = 0;   // process CPU per step
  double mean_batch = 0;
};

Figure Direct(StandInModel& m, int steps) {
  std::vector<double> wall;
  const double c0 = ProcessCpuMs();
  for (int s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    m.Work();
    wall.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  Figure f{.cpu_ms = (ProcessCpuMs() - c0) / steps};
  std::sort(wall.begin(), wall.end());
  f.wall_ms = wall[wall.size() / 2];
  return f;
}

// Wall per step: the time between the starts of consecutive batches, as a session sees it.
Figure Batched(StandInModel& m, int b, int steps, Clock::duration book) {
  gemma::StepBatcher batcher(m, b);
  std::vector<std::unique_ptr<gemma::Backend>> ctx;
  for (int i = 0; i < b; ++i) ctx.push_back(m.NewContext({}));
  std::vector<std::vector<double>> wall(b);
  std::barrier start(b + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < b; ++i) {
    threads.emplace_back([&, i] {
      const int32_t token = 5;
      gemma::ForwardResult r;
      start.arrive_and_wait();
      auto t0 = Clock::now();
      for (int s = 0; s < steps; ++s) {
        batcher.Step(ctx[i].get(), {.tokens = std::span<const int32_t>(&token, 1)}, &r);
        Busy(book);  // the session's choice of its next token
        const auto t1 = Clock::now();
        wall[i].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
        t0 = t1;
      }
      batcher.Leave(ctx[i].get());
    });
  }
  start.arrive_and_wait();
  const double c0 = ProcessCpuMs();
  for (std::thread& t : threads) t.join();
  Figure f{.cpu_ms = (ProcessCpuMs() - c0) / steps};
  const gemma::StepBatcher::Stats st = batcher.stats();
  f.mean_batch = static_cast<double>(st.steps) / std::max<int64_t>(1, st.batches);
  std::vector<double> all;
  for (const auto& w : wall) all.insert(all.end(), w.begin(), w.end());
  std::sort(all.begin(), all.end());
  f.wall_ms = all[all.size() / 2];
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, b = 4, steps = 200, jobs = 300;
  double step_ms = 25, book_us = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--threads") {
      threads = std::stoi(v);
    } else if (k == "--batch") {
      b = std::stoi(v);
    } else if (k == "--steps") {
      steps = std::stoi(v);
    } else if (k == "--step-ms") {
      step_ms = std::stod(v);
    } else if (k == "--jobs") {
      jobs = std::stoi(v);
    } else if (k == "--book-us") {
      book_us = std::stod(v);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--threads T] [--batch B] [--steps N] [--step-ms MS] [--jobs J] "
                   "[--book-us US]\n",
                   argv[0]);
      return 2;
    }
  }
  Calibrate();
  StandInModel m(threads, step_ms, jobs);
  const auto book = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::micro>(book_us));
  Direct(m, 10);  // (warm-up)
  const Figure d = Direct(m, steps);
  const Figure s = Batched(m, b, steps, book);
  std::printf("%d threads, B = %d, %d steps of %.1f ms in %d jobs, %.0f us bookkeeping\n", threads,
              b, steps, step_ms, jobs, book_us);
  std::printf("%10s %12s %12s\n", "", "wall ms/step", "cpu ms/step");
  std::printf("%10s %12.3f %12.3f\n", "direct", d.wall_ms, d.cpu_ms);
  std::printf("%10s %12.3f %12.3f\n", "batcher", s.wall_ms, s.cpu_ms);
  std::printf("hand-off: %.3f ms wall, %.3f ms cpu per step, mean batch %.2f\n",
              s.wall_ms - d.wall_ms, s.cpu_ms - d.cpu_ms, s.mean_batch);
  return 0;
}
