// Warm pools (internal to session/; the logic is in pool.cc): per configured pool,
// sandboxes booted ahead of demand, never given code to run and owned by no tenant,
// until a create of the pool's shape claims one.
//
// Reactor-only, like every session. Boots run on the launcher threads, as every boot.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "session/config.h"
#include "session/types.h"

namespace cela::session {

struct Session;

// What GET /v1/pools shows of one pool.
struct PoolStatus {
  PoolConfig config;
  uint64_t ready = 0, booting = 0;
  uint64_t hits = 0;    // creates served by a claim
  uint64_t misses = 0;  // creates of the pool's shape that found it empty (booted cold)
  std::optional<double> refill_ms_last, refill_ms_p50;  // boot of a pooled sandbox
  std::optional<double> claim_ms_p50;                   // inside the daemon
  std::string last_error;                               // of the last failed refill, "" if none
};

struct WarmPool {
  PoolConfig config;
  std::deque<std::shared_ptr<Session>> ready;  // oldest first
  uint64_t booting = 0;
  uint64_t hits = 0, misses = 0;
  std::deque<double> refill_ms, claim_ms;  // the last kSamples of each
  std::string last_error;
  // Armed after a failed refill (no capacity, a boot that failed): the next try.
  std::unique_ptr<boost::asio::steady_timer> retry;
  static constexpr size_t kSamples = 256;

  // True when a create of `spec` is of this pool's shape.
  bool matches(const CreateSessionSpec& spec) const;
  PoolStatus status() const;
};

}  // namespace cela::session
