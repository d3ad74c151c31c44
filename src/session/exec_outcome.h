// exec_outcome: how an exec ended, in the words of its record (state, exit code,
// signal, reason). Pure: it maps what the reactor observed to the record's fields.
#pragma once

#include <optional>
#include <string>

#include "runtime/runtime.h"
#include "store/records.h"

namespace cela::session {

struct ExecObservation {
  std::optional<runtime::StartFailure> start_failure;
  std::optional<int> wait_status;  // of the main process
  bool timed_out = false;
  uint64_t timeout_ms = 0;
  std::optional<int> kill_signal;   // killed on request (POST …/kill)
  // The session ended under the exec: its reason ("deleted", "daemon_shutdown",
  // "init_died", ...) and message. init_died makes the exec `failed`; any other
  // reason makes it `killed` with that reason.
  std::optional<std::string> session_ended, session_message;
  std::string command;  // argv[0] or the shell line, for "command not found"
  // The writable layer had no room left when the exec ended (writes failed ENOSPC).
  bool disk_full = false;
  uint64_t disk_limit_bytes = 0;
  runtime::Stats stats;
  runtime::Limits limits;
};

// Fills state, exit_code, signal and reason of `record`.
void classify_exec(const ExecObservation& o, store::ExecRecord& record);

}  // namespace cela::session
