#include "jail/result.h"

#include <gtest/gtest.h>
#include <signal.h>

using namespace cela::jail;

namespace {
int exited(int code) { return (code & 0xff) << 8; }
int signalled(int sig) { return sig & 0x7f; }

RunObservation base() {
  RunObservation o;
  o.limits = {512ull << 20, 1.0, 64};
  o.timeout_ms = 30'000;
  o.stats.cpu_usage_ns = 12'345'678;
  o.stats.memory_peak_bytes = 1 << 20;
  o.stats.pids_peak = 3;
  return o;
}
}  // namespace

TEST(Classify, NormalExitKeepsCodeAndStats) {
  auto o = base();
  o.wait_status = exited(3);
  auto r = classify(o);
  EXPECT_EQ(r.state, RunState::exited);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_FALSE(r.signal);
  EXPECT_EQ(r.cpu_ms, 12u);
  EXPECT_EQ(r.pids_peak, 3u);
  EXPECT_EQ(exit_code_for(r), 3);
}

TEST(Classify, SigkillWithNewOomKillIsOomKilled) {
  auto o = base();
  o.wait_status = signalled(SIGKILL);
  o.oom_kills_before = 1;
  o.stats.oom_kills = 2;
  auto r = classify(o);
  EXPECT_EQ(r.state, RunState::oom_killed);
  EXPECT_NE(r.reason.find("memory limit 512 MiB"), std::string::npos) << r.reason;
  EXPECT_EQ(exit_code_for(r), kExitOomKilled);
}

TEST(Classify, SigkillWithoutOomIsKilled) {
  auto o = base();
  o.wait_status = signalled(SIGKILL);
  o.stats.oom_kills = 1;
  o.oom_kills_before = 1;
  auto r = classify(o);
  EXPECT_EQ(r.state, RunState::killed);
  EXPECT_EQ(r.signal, SIGKILL);
  EXPECT_EQ(r.reason, "killed by SIGKILL");
  EXPECT_EQ(exit_code_for(r), 128 + SIGKILL);
}

TEST(Classify, TimeoutWinsOverTheKillItCaused) {
  auto o = base();
  o.wait_status = signalled(SIGKILL);
  o.timed_out = true;
  auto r = classify(o);
  EXPECT_EQ(r.state, RunState::timed_out);
  EXPECT_NE(r.reason.find("timeout of 30 s"), std::string::npos) << r.reason;
  EXPECT_EQ(exit_code_for(r), kExitTimedOut);
}

TEST(Classify, RunnerSignalIsKilledWithThatSignal) {
  auto o = base();
  o.runner_signal = SIGTERM;
  auto r = classify(o);
  EXPECT_EQ(r.state, RunState::killed);
  EXPECT_NE(r.reason.find("SIGTERM"), std::string::npos) << r.reason;
  EXPECT_EQ(exit_code_for(r), 128 + SIGTERM);
}

TEST(Classify, PidsLimitIsNamedInTheReason) {
  auto o = base();
  o.wait_status = exited(1);
  o.stats.pids_max_hits = 7;
  auto r = classify(o);
  EXPECT_EQ(r.state, RunState::exited);
  EXPECT_NE(r.reason.find("pids limit 64 reached (7 forks refused)"), std::string::npos) << r.reason;
}

TEST(Classify, FailureCarriesErrnoAndExitCode) {
  auto o = base();
  o.failure = "command not found: nope";
  o.failure_exit_code = kExitNotFound;
  auto r = classify(o);
  EXPECT_EQ(r.state, RunState::failed);
  EXPECT_EQ(exit_code_for(r), kExitNotFound);
  o.failure = "sandbox setup: mount proc";
  o.failure_errno = EPERM;
  o.failure_exit_code.reset();
  r = classify(o);
  EXPECT_EQ(r.reason, "sandbox setup: mount proc: Operation not permitted");
  EXPECT_EQ(exit_code_for(r), kExitFailed);
}

TEST(Classify, JsonHasEveryField) {
  auto o = base();
  o.wait_status = exited(0);
  auto j = classify(o).to_json();
  for (const char* key : {"state", "exit_code", "signal", "reason", "duration_ms", "cpu_ms", "peak_memory_bytes",
                          "pids_peak"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j.at("state").as_string(), "exited");
  EXPECT_TRUE(j.at("signal").is_null());
}
