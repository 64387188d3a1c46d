#include "core/thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GEMMA_PAUSE() _mm_pause()
#else
#define GEMMA_PAUSE() std::this_thread::yield()
#endif

namespace gemma {
namespace {

// Spin this long for the next job before sleeping: a decode step's jobs arrive microseconds apart.
constexpr auto kSpin = std::chrono::microseconds(100);

uint32_t EpochOf(uint64_t w) { return static_cast<uint32_t>(w >> 32); }

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(threads - 1);
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  word_.fetch_add(uint64_t{1} << 32, std::memory_order_acq_rel);
  word_.notify_all();
  for (std::thread& t : workers_) t.join();
}

// Claims tasks of job `epoch` until none is left or a newer job started. A claim succeeds only
// while the word still carries this epoch, and the job cannot finish (so fn_/call_ cannot change)
// before a claimed task is done.
void ThreadPool::Drain(uint32_t epoch, int thread) {
  uint64_t w = word_.load(std::memory_order_acquire);
  for (;;) {
    if (EpochOf(w) != epoch || static_cast<int>(static_cast<uint32_t>(w)) >= tasks_) return;
    if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      continue;
    }
    call_(fn_, static_cast<int>(static_cast<uint32_t>(w)), thread);
    done_.fetch_add(1, std::memory_order_acq_rel);
    w = word_.load(std::memory_order_acquire);
  }
}

void ThreadPool::RunErased(int tasks, const void* fn, Call call) {
  fn_ = fn;
  call_ = call;
  tasks_ = tasks;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t epoch = EpochOf(word_.load(std::memory_order_relaxed)) + 1;
  word_.store(static_cast<uint64_t>(epoch) << 32, std::memory_order_release);
  word_.notify_all();
  Drain(epoch, 0);
  for (int spins = 0; done_.load(std::memory_order_acquire) != tasks; ++spins) {
    if (spins < 4096) {
      GEMMA_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop(int thread) {
  uint32_t seen = 0;
  for (;;) {
    uint64_t w = word_.load(std::memory_order_acquire);
    if (EpochOf(w) == seen) {
      const auto until = std::chrono::steady_clock::now() + kSpin;
      int spins = 0;
      while (EpochOf(w = word_.load(std::memory_order_acquire)) == seen) {
        GEMMA_PAUSE();
        if (++spins % 128 == 0 && std::chrono::steady_clock::now() > until) word_.wait(w);
      }
    }
    seen = EpochOf(w);
    if (stop_.load(std::memory_order_acquire)) return;
    Drain(seen, thread);
  }
}

}  // namespace gemma
