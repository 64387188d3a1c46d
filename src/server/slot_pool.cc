#include "server/slot_pool.h"

#include <algorithm>

namespace gemma::server {

SlotPool::SlotPool(Engine& engine, int slots, int max_queue) : max_queue_(max_queue) {
  for (int i = 0; i < slots; ++i) sessions_.push_back(engine.NewSession());
  busy_.assign(slots, false);
  last_used_.assign(slots, 0);
  for (int i = 0; i < slots; ++i) {
    workers_.push_back(std::make_unique<Worker>());
    Worker* w = workers_.back().get();
    w->thread = std::thread([w] { w->Loop(); });
  }
}

SlotPool::~SlotPool() {
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mu);
      w->quit = true;
    }
    w->cv.notify_all();
    w->thread.join();
  }
}

void SlotPool::Worker::Loop() {
  std::unique_lock lock(mu);
  while (true) {
    cv.wait(lock, [&] { return quit || job; });
    if (!job) return;
    std::function<void()> j = std::move(job);
    job = nullptr;
    lock.unlock();
    j();  // destroys what the job owns (the lease among it) before the next one starts
    j = nullptr;
    lock.lock();
  }
}

void SlotPool::Lease::Post(std::function<void()> job) const {
  Worker& w = *pool_->workers_[slot_];
  {
    std::lock_guard lock(w.mu);
    w.job = std::move(job);
  }
  w.cv.notify_all();
}

SlotPool::Lease::~Lease() { pool_->Release(slot_); }

Session& SlotPool::Lease::session() const { return *pool_->sessions_[slot_]; }

std::unique_ptr<SlotPool::Lease> SlotPool::Acquire(const std::vector<int32_t>& prompt) {
  std::unique_lock lock(mu_);
  auto idle = [&] { return std::find(busy_.begin(), busy_.end(), false) != busy_.end(); };
  if (shutdown_) return nullptr;
  if (!idle()) {
    if (waiting_ >= max_queue_) return nullptr;
    ++waiting_;
    cv_.wait(lock, [&] { return shutdown_ || idle(); });
    --waiting_;
    if (shutdown_) return nullptr;
  }
  // Longest shared prefix wins; among equals the least recently used, so a slot holding another
  // conversation's prefix survives as long as possible.
  int best = -1;
  size_t best_len = 0;
  for (int i = 0; i < size(); ++i) {
    if (busy_[i]) continue;
    const std::vector<int32_t>& ev = sessions_[i]->evaluated();
    size_t n = 0;
    while (n < ev.size() && n < prompt.size() && ev[n] == prompt[n]) ++n;
    if (best < 0 || n > best_len || (n == best_len && last_used_[i] < last_used_[best])) {
      best = i;
      best_len = n;
    }
  }
  busy_[best] = true;
  last_used_[best] = ++clock_;
  return std::make_unique<Lease>(this, best);
}

void SlotPool::Release(int slot) {
  {
    std::lock_guard lock(mu_);
    busy_[slot] = false;
  }
  cv_.notify_one();
}

void SlotPool::Shutdown() {
  {
    std::lock_guard lock(mu_);
    shutdown_ = true;
  }
  cv_.notify_all();
}

int SlotPool::busy() const {
  std::lock_guard lock(mu_);
  return static_cast<int>(std::count(busy_.begin(), busy_.end(), true));
}

int SlotPool::queued() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

}  // namespace gemma::server
