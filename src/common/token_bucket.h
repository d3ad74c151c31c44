// A token bucket: up to `burst` tokens, refilled at `rate` per second; take() spends
// one when there is one. Bounds how often one party may make someone else work (a
// sandbox's seccomp notifications, its audit records) without a timer per party.
// Not thread-safe: each bucket belongs to one thread (its owner says which).
#pragma once

#include <algorithm>
#include <chrono>

namespace cela {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;

  TokenBucket(double rate_per_s, double burst, Clock::time_point now = Clock::now())
      : rate_(rate_per_s), burst_(burst), tokens_(burst), at_(now) {}

  // Spends a token if one is there.
  bool take(Clock::time_point now = Clock::now()) {
    refill(now);
    if (tokens_ < 1.0) return false;
    tokens_ -= 1.0;
    return true;
  }

  // How long until take() succeeds (zero when it would now).
  Clock::duration until_next(Clock::time_point now = Clock::now()) {
    refill(now);
    if (tokens_ >= 1.0) return Clock::duration::zero();
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>((1.0 - tokens_) / rate_));
  }

 private:
  void refill(Clock::time_point now) {
    if (now <= at_) return;
    tokens_ = std::min(burst_, tokens_ + std::chrono::duration<double>(now - at_).count() * rate_);
    at_ = now;
  }

  double rate_, burst_, tokens_;
  Clock::time_point at_;
};

}  // namespace cela
