// The structured result of a run: what happened, in words a caller can act on.
//
// classify() is pure: it maps what the host observed (wait status, whether the
// timeout fired, the cgroup's OOM and pids counters, a setup failure) to a state, an
// exit code and a one-line reason that names the limit that was hit.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "jail/cgroup.h"

namespace cela::jail {

enum class RunState { exited, timed_out, oom_killed, killed, failed };
std::string_view to_string(RunState state);

struct RunResult {
  RunState state = RunState::failed;
  std::optional<int> exit_code;  // set when the process exited normally
  std::optional<int> signal;     // set when it was ended by a signal
  std::string reason;            // one line, human
  uint64_t duration_ms = 0;
  uint64_t cpu_ms = 0;
  uint64_t peak_memory_bytes = 0;
  uint64_t pids_peak = 0;

  boost::json::object to_json() const;
};

struct RunObservation {
  std::optional<int> wait_status;      // of the main process, when it ended
  bool timed_out = false;              // the wall-clock timeout fired
  uint64_t timeout_ms = 0;
  std::optional<int> runner_signal;    // the runner was told to stop (SIGTERM, SIGINT)
  std::optional<std::string> failure;  // setup or start failure, already worded
  int failure_errno = 0;
  std::optional<int> failure_exit_code;  // 126/127 when the command could not be executed
  CgroupStats stats;                   // at the end of the run
  uint64_t oom_kills_before = 0;
  CgroupLimits limits;
};

RunResult classify(const RunObservation& observation);

// Process exit code of `cela run` for a result: the command's own code, 128+signal,
// or one of the codes below.
inline constexpr int kExitUsage = 2;       // bad command line
inline constexpr int kExitOomKilled = 121; // memory limit reached
inline constexpr int kExitFailed = 125;    // the sandbox could not run the command
inline constexpr int kExitCannotExec = 126;
inline constexpr int kExitNotFound = 127;
inline constexpr int kExitTimedOut = 124;  // as timeout(1)
int exit_code_for(const RunResult& result);

}  // namespace cela::jail
