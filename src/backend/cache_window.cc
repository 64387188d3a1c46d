#include "backend/cache_window.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "format/config.h"
#include "gemma/error.h"
#include "model/model.h"

namespace gemma {

bool CacheWindow::Truncate(int n) {
  if (n < 0 || n > cached_) {
    throw Error(ErrorCode::kInvalidArgument, "truncate to " + std::to_string(n) + " beyond the " +
                                                 std::to_string(cached_) + " cached tokens");
  }
  const int need = std::max(0, n - window_ + 1);
  if (n > 0 && valid_from_ > need) {
    Reset();
    return false;
  }
  cached_ = n;
  return true;
}

CacheGeometry PlanCacheGeometry(const TextConfig& config, const BackendOptions& options) {
  CacheGeometry g;
  g.capacity = std::min(options.capacity, config.max_position_embeddings);
  if (g.capacity <= 0)
    throw Error(ErrorCode::kInvalidArgument, "backend capacity must be positive");
  const int window = config.sliding_window;
  const int slack = options.slack > 0 ? options.slack : window;
  g.ring = std::min(g.capacity, window + slack);
  g.slack = g.ring - std::min(window, g.ring);
  return g;
}

std::vector<CacheSlotShape> PlanCacheSlots(const Model& model, const CacheGeometry& geometry) {
  std::vector<CacheSlotShape> slots(model.num_caches());
  for (const LayerPlan& p : model.layers()) {
    if (p.cache_slot < 0) continue;
    slots[p.cache_slot] = {.width = p.num_kv_heads * p.head_dim,
                           .ring = p.window > 0 ? geometry.ring : geometry.capacity};
  }
  return slots;
}

void ValidateForward(const ForwardRequest& req, int cached, int capacity, int vocab_size) {
  const int n = static_cast<int>(req.tokens.size());
  if (n == 0) throw Error(ErrorCode::kInvalidArgument, "Forward needs at least one token");
  if (cached + n > capacity) {
    throw Error(ErrorCode::kCapacity, "context capacity " + std::to_string(capacity) +
                                          " exceeded: " + std::to_string(cached) + " cached + " +
                                          std::to_string(n) + " new tokens");
  }
  for (int32_t t : req.tokens) {
    if (t < 0 || t >= vocab_size) {
      throw Error(ErrorCode::kInvalidArgument, "token id " + std::to_string(t) +
                                                   " outside the vocabulary [0, " +
                                                   std::to_string(vocab_size) + ")");
    }
  }
  if (!req.soft.empty() && req.soft.size() != req.tokens.size()) {
    throw Error(ErrorCode::kInvalidArgument, "soft tokens: one entry per token expected");
  }
  if (req.mode == OutputMode::kSelect &&
      (!req.allowed || req.allowed->size() * 64 < static_cast<size_t>(vocab_size))) {
    throw Error(ErrorCode::kInvalidArgument, "select output needs an allowed-token bitmask");
  }
}

CpuContextBytes PlanCpuContextBytes(const Model& model, const BackendOptions& options,
                                    int positions, int threads) {
  const TextConfig& cfg = model.text();
  const CacheGeometry geo = PlanCacheGeometry(cfg, options);
  CpuContextBytes b;
  const size_t p = static_cast<size_t>(std::max(0, std::min(positions, geo.capacity)));
  for (const LayerPlan& l : model.layers()) {
    if (l.cache_slot < 0) continue;
    const size_t ring = static_cast<size_t>(l.window > 0 ? geo.ring : geo.capacity);
    b.kv +=
        2 * std::min(p, ring) * static_cast<size_t>(l.num_kv_heads) * l.head_dim * sizeof(float);
  }
  const size_t group = static_cast<size_t>(cfg.num_heads / std::max(1, cfg.num_kv_heads));
  b.scratch = static_cast<size_t>(std::max(1, threads)) * group * geo.capacity * sizeof(double);
  return b;
}

void BackendModel::ForwardBatch(std::span<BatchStep> steps) {
  for (BatchStep& s : steps) {
    try {
      s.context->Forward(s.request, s.result);
    } catch (...) {
      s.error = std::current_exception();
    }
  }
}

void SelectFromLogits(const float* z, int vocab, const std::vector<uint64_t>& allowed,
                      ForwardResult* out) {
  int best = -1;
  double mx = -std::numeric_limits<double>::infinity();
  for (int i = 0; i < vocab; ++i) {
    mx = std::max(mx, static_cast<double>(z[i]));
    if ((allowed[i >> 6] >> (i & 63)) & 1) {
      if (best < 0 || z[i] > z[best]) best = i;
    }
  }
  if (best < 0) throw Error(ErrorCode::kConstraint, "select: no token is allowed");
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(z[i]) - mx);
  out->ids.push_back(best);
  out->logprobs.push_back(static_cast<float>(z[best] - mx - std::log(sum)));
}

}  // namespace gemma
