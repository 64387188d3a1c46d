#include <gtest/gtest.h>

#include "core/thread_pool.h"
#include "gemma/error.h"

namespace gemma {
namespace {

// Issue 36: 100,000 threads aborted the process ("terminate called without an active exception")
// and 30,000 took 143 s and 15 GB; the pool now refuses counts above its documented limit.
TEST(ThreadPoolLimits, TooManyThreadsIsATypedError) {
  try {
    ThreadPool pool(100000);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("1024"), std::string::npos) << e.what();
  }
  ThreadPool ok(3);
  EXPECT_EQ(ok.size(), 3);
}

}  // namespace
}  // namespace gemma
