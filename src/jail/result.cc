#include "jail/result.h"

#include <sys/wait.h>

#include <boost/json.hpp>
#include <cstring>

#include "common/units.h"

namespace cela::jail {

std::string_view to_string(RunState state) {
  switch (state) {
    case RunState::exited: return "exited";
    case RunState::timed_out: return "timed_out";
    case RunState::oom_killed: return "oom_killed";
    case RunState::killed: return "killed";
    case RunState::failed: return "failed";
  }
  return "failed";
}

namespace {

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string pids_note(const RunObservation& o) {
  if (o.stats.pids_max_hits == 0 || o.limits.pids == 0) return "";
  return "; pids limit " + std::to_string(o.limits.pids) + " reached (" + std::to_string(o.stats.pids_max_hits) +
         " fork" + (o.stats.pids_max_hits == 1 ? "" : "s") + " refused)";
}

}  // namespace

RunResult classify(const RunObservation& o) {
  RunResult r;
  r.cpu_ms = o.stats.cpu_usage_ns / 1'000'000;
  r.peak_memory_bytes = o.stats.memory_peak_bytes;
  r.pids_peak = o.stats.pids_peak;
  bool oom = o.stats.oom_kills > o.oom_kills_before;

  if (o.failure) {
    r.state = RunState::failed;
    r.reason = *o.failure;
    if (o.failure_errno) r.reason += std::string(": ") + std::strerror(o.failure_errno);
    r.exit_code = o.failure_exit_code;
    return r;
  }
  if (o.runner_signal) {
    r.state = RunState::killed;
    r.signal = *o.runner_signal;  // the stop request is what ended it
    r.reason = "stopped: the runner received " + signal_name(*o.runner_signal);
    return r;
  }
  if (o.timed_out) {
    r.state = RunState::timed_out;
    r.signal = SIGKILL;
    r.reason = "wall-clock timeout of " + format_duration(o.timeout_ms) +
               " reached; every process of the sandbox was killed";
    return r;
  }
  if (!o.wait_status) {
    r.state = RunState::failed;
    r.reason = "the sandbox ended before the command did";
    return r;
  }
  int status = *o.wait_status;
  if (WIFEXITED(status)) {
    r.state = RunState::exited;
    r.exit_code = WEXITSTATUS(status);
    r.reason = "exited with code " + std::to_string(*r.exit_code);
    if (oom)
      r.reason += "; memory limit " + format_size(o.limits.memory_bytes) + " reached (a process was OOM-killed)";
    r.reason += pids_note(o);
    return r;
  }
  int sig = WTERMSIG(status);
  r.signal = sig;
  if (sig == SIGKILL && oom) {
    r.state = RunState::oom_killed;
    r.reason = "memory limit " + format_size(o.limits.memory_bytes) + " reached; killed by OOM";
    return r;
  }
  r.state = RunState::killed;
  r.reason = "killed by " + signal_name(sig) + pids_note(o);
  return r;
}

int exit_code_for(const RunResult& r) {
  switch (r.state) {
    case RunState::exited: return r.exit_code.value_or(kExitFailed);
    case RunState::timed_out: return kExitTimedOut;
    case RunState::oom_killed: return kExitOomKilled;
    case RunState::killed: return 128 + r.signal.value_or(SIGKILL);
    case RunState::failed: return r.exit_code.value_or(kExitFailed);
  }
  return kExitFailed;
}

boost::json::object RunResult::to_json() const {
  boost::json::object o;
  o["state"] = to_string(state);
  o["exit_code"] = exit_code ? boost::json::value(*exit_code) : boost::json::value(nullptr);
  o["signal"] = signal ? boost::json::value(*signal) : boost::json::value(nullptr);
  o["reason"] = reason;
  o["duration_ms"] = duration_ms;
  o["cpu_ms"] = cpu_ms;
  o["peak_memory_bytes"] = peak_memory_bytes;
  o["pids_peak"] = pids_peak;
  return o;
}

}  // namespace cela::jail
