// Slots: one Session each, never shared between threads. A request takes the idle slot whose
// evaluated tokens share the longest prefix with its prompt (a multi-turn chat pays only for its
// new tokens); when none is idle it waits in a bounded queue, and past the bound it is refused
// (429).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "gemma/engine.h"

namespace gemma::server {

class SlotPool {
 public:
  SlotPool(Engine& engine, int slots, int max_queue);
  ~SlotPool();

  class Lease {
   public:
    Lease(SlotPool* pool, int slot) : pool_(pool), slot_(slot) {}
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Session& session() const;
    int slot() const { return slot_; }
    // Runs `job` on the slot's own worker thread (one per slot, made once: no thread per
    // request). The job may own this lease and release it at its end.
    void Post(std::function<void()> job) const;

   private:
    SlotPool* pool_;
    int slot_;
  };

  // Waits for an idle slot. Returns null when the queue is full (the caller answers 429) or the
  // pool is shutting down.
  std::unique_ptr<Lease> Acquire(const std::vector<int32_t>& prompt);

  // Wakes every waiter with no slot; later Acquire calls fail.
  void Shutdown();

  int size() const { return static_cast<int>(sessions_.size()); }
  int busy() const;
  int queued() const;

 private:
  void Release(int slot);

  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::function<void()> job;
    bool quit = false;
    std::thread thread;
    void Loop();
  };

  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<bool> busy_;
  std::vector<uint64_t> last_used_;
  uint64_t clock_ = 0;
  int max_queue_;
  int waiting_ = 0;
  bool shutdown_ = false;
  mutable std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace gemma::server
