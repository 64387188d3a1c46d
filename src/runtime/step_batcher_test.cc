// StepBatcher against a stand-in model (no weights): what each step gets back when many sessions
// step at once.
#include "runtime/step_batcher.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gemma/error.h"

namespace gemma {
namespace {

class StandInModel;

class StandInContext : public Backend {
 public:
  StandInContext(StandInModel& m, int32_t id) : model_(m), id_(id) {}
  std::string name() const override { return "stand-in"; }
  BackendCapabilities capabilities() const override { return {}; }
  void Forward(const ForwardRequest& request, ForwardResult* result) override;
  int cached() const override { return 0; }
  int capacity() const override { return 1 << 20; }
  bool Truncate(int) override { return true; }
  void Reset() override {}
  size_t resident_bytes() const override { return 0; }
  int32_t id() const { return id_; }

 private:
  StandInModel& model_;
  const int32_t id_;
};

// Each step's result is its context's id plus its token; a context with a negative id fails.
class StandInModel : public BackendModel {
 public:
  std::string name() const override { return "stand-in"; }
  std::unique_ptr<Backend> NewContext(const BackendOptions&) override { return nullptr; }
  size_t shared_bytes() const override { return 0; }
  bool batches_steps() const override { return true; }
  void ForwardBatch(std::span<BatchStep> steps) override {
    Record(static_cast<int>(steps.size()));
    for (BatchStep& s : steps) {
      try {
        Eval(*static_cast<StandInContext*>(s.context), s.request, s.result);
      } catch (...) {
        s.error = std::current_exception();
      }
    }
  }
  void Eval(const StandInContext& c, const ForwardRequest& request, ForwardResult* result) {
    if (c.id() < 0) throw Error(ErrorCode::kInvalidArgument, "stand-in: a failing context");
    result->ids.assign(1, c.id() + request.tokens[0]);
  }
  void Record(int size) {
    std::lock_guard<std::mutex> lock(mutex);
    sizes.push_back(size);
  }

  std::mutex mutex;
  std::vector<int> sizes;  // of every evaluation
};

void StandInContext::Forward(const ForwardRequest& request, ForwardResult* result) {
  model_.Record(1);
  model_.Eval(*this, request, result);
}

int Step(StepBatcher& b, StandInContext& c, int32_t token, ForwardResult* r) {
  return b.Step(&c, {.tokens = std::span<const int32_t>(&token, 1)}, r);
}

// Many sessions stepping at once, more than max_batch: every step gets its own result or error,
// batches never exceed max_batch, and all of them end.
TEST(StepBatcher, EveryStepGetsItsOwnResult) {
  StandInModel m;
  constexpr int kSessions = 7, kSteps = 40;
  std::vector<std::unique_ptr<StandInContext>> ctx;
  for (int i = 0; i < kSessions; ++i)
    ctx.push_back(std::make_unique<StandInContext>(m, i == 3 ? -1 : 1000 * (i + 1)));
  StepBatcher batcher(m, 3);
  std::vector<std::thread> threads;
  std::vector<int> wrong(kSessions, 0), failed(kSessions, 0);
  for (int i = 0; i < kSessions; ++i) {
    threads.emplace_back([&, i] {
      for (int s = 0; s < kSteps; ++s) {
        ForwardResult r;
        try {
          Step(batcher, *ctx[i], s, &r);
          if (r.ids != std::vector<int32_t>{ctx[i]->id() + s}) ++wrong[i];
        } catch (const Error&) {
          ++failed[i];
        }
        if (s % 7 == i) batcher.Leave(ctx[i].get());  // (leaves now and then, comes back)
      }
      batcher.Leave(ctx[i].get());
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kSessions; ++i) {
    EXPECT_EQ(wrong[i], 0) << "session " << i;
    EXPECT_EQ(failed[i], i == 3 ? kSteps : 0) << "session " << i;
  }
  const StepBatcher::Stats st = batcher.stats();
  EXPECT_EQ(st.steps, kSessions * kSteps);
  EXPECT_LE(st.max_size, 3);
  int evaluated = 0;
  for (int size : m.sizes) {
    EXPECT_LE(size, 3);
    evaluated += size;
  }
  EXPECT_EQ(evaluated, kSessions * kSteps);
}

}  // namespace
}  // namespace gemma
