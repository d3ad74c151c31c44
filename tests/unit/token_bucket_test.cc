#include "common/token_bucket.h"

#include <gtest/gtest.h>

namespace cela {
namespace {

using namespace std::chrono_literals;
using Clock = TokenBucket::Clock;

TEST(TokenBucket, ABurstThenTheRate) {
  const Clock::time_point t0{};
  TokenBucket b(10, 3, t0);  // 10 a second, 3 at once
  EXPECT_TRUE(b.take(t0));
  EXPECT_TRUE(b.take(t0));
  EXPECT_TRUE(b.take(t0));
  EXPECT_FALSE(b.take(t0));
  EXPECT_EQ(b.until_next(t0), std::chrono::duration_cast<Clock::duration>(100ms));
  EXPECT_FALSE(b.take(t0 + 50ms));
  EXPECT_TRUE(b.take(t0 + 100ms));
  EXPECT_FALSE(b.take(t0 + 100ms));
}

TEST(TokenBucket, NeverHoldsMoreThanItsBurst) {
  const Clock::time_point t0{};
  TokenBucket b(1000, 2, t0);
  const auto later = t0 + 1h;
  EXPECT_EQ(b.until_next(later), Clock::duration::zero());
  EXPECT_TRUE(b.take(later));
  EXPECT_TRUE(b.take(later));
  EXPECT_FALSE(b.take(later));
}

TEST(TokenBucket, AClockGoingBackGivesNothing) {
  const Clock::time_point t0 = Clock::time_point{} + 10s;
  TokenBucket b(1, 1, t0);
  EXPECT_TRUE(b.take(t0));
  EXPECT_FALSE(b.take(t0 - 5s));
  EXPECT_FALSE(b.take(t0 + 500ms));
  EXPECT_TRUE(b.take(t0 + 1s));
}

}  // namespace
}  // namespace cela
