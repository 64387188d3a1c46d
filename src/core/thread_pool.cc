#include "core/thread_pool.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <system_error>

#include "gemma/error.h"

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

constexpr int kBits = 20;  // task count and index fields
constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
uint32_t EpochOf(uint64_t w) { return static_cast<uint32_t>(w >> (2 * kBits)); }
int TasksOf(uint64_t w) { return static_cast<int>((w >> kBits) & kMask); }
int IndexOf(uint64_t w) { return static_cast<int>(w & kMask); }

}  // namespace

ThreadPool::ThreadPool(int threads) {
  // Far above any useful count (tasks are split per thread, so a huge pool only costs memory and
  // start-up: 30,000 threads took 143 s and 15 GB); a typed error instead of what the OS does.
  constexpr int kMaxThreads = 1024;
  if (threads > kMaxThreads) {
    throw Error(ErrorCode::kInvalidArgument, "threads: " + std::to_string(threads) +
                                                 " is above the limit of " +
                                                 std::to_string(kMaxThreads));
  }
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(threads - 1);
  try {
    for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
  } catch (const std::system_error& e) {
    // Joinable threads in a destroyed vector would call std::terminate: stop the started ones.
    stop_.store(true, std::memory_order_release);
    word_.fetch_add(uint64_t{1} << (2 * kBits), std::memory_order_acq_rel);
    word_.notify_all();
    for (std::thread& t : workers_) t.join();
    throw Error(ErrorCode::kCapacity,
                "cannot start " + std::to_string(threads) + " threads (" + e.what() + ")");
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  word_.fetch_add(uint64_t{1} << (2 * kBits), std::memory_order_acq_rel);
  word_.notify_all();
  for (std::thread& t : workers_) t.join();
}

// Claims tasks of job `epoch` until none is left or a newer job started. The count and the index
// come from the same word as the epoch, and a claim (CAS) succeeds only on that word, so a claimed
// task always belongs to the job whose fn_/call_ are current: the job cannot finish, and the next
// one cannot be set up, before a claimed task is done.
void ThreadPool::Drain(uint32_t epoch, int thread) {
  uint64_t w = word_.load(std::memory_order_acquire);
  for (;;) {
    if (EpochOf(w) != epoch || IndexOf(w) >= TasksOf(w)) return;
    if (!word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
      continue;
    }
    call_(fn_, IndexOf(w), thread);
    done_.fetch_add(1, std::memory_order_acq_rel);
    w = word_.load(std::memory_order_acquire);
  }
}

void ThreadPool::RunErased(int tasks, const void* fn, Call call) {
  if (static_cast<uint64_t>(tasks) > kMask) std::abort();  // documented limit
  fn_ = fn;
  call_ = call;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t epoch = (EpochOf(word_.load(std::memory_order_relaxed)) + 1) & 0xFFFFFF;
  word_.store(
      (static_cast<uint64_t>(epoch) << (2 * kBits)) | (static_cast<uint64_t>(tasks) << kBits),
      std::memory_order_release);
  word_.notify_all();
  Drain(epoch, 0);
  for (int spins = 0; done_.load(std::memory_order_acquire) < tasks; ++spins) {
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
