#include "session/exec_outcome.h"

#include <signal.h>

#include <cstring>

#include "common/units.h"
#include "runtime/outcome.h"

namespace cela::session {

namespace {
std::string sig_name(int sig) { return std::string("SIG") + (::sigabbrev_np(sig) ?: "?"); }
}  // namespace

void classify_exec(const ExecObservation& o, store::ExecRecord& r) {
  runtime::RunObservation obs;
  obs.limits = o.limits;
  obs.timeout_ms = o.timeout_ms;
  obs.timed_out = o.timed_out;
  obs.wait_status = o.wait_status;
  obs.stats = o.stats;
  if (o.start_failure) {
    const auto& f = *o.start_failure;
    bool exec_step = f.step == runtime::ExecStep::execve;
    bool missing = exec_step && (f.err == ENOENT || f.err == ENOTDIR);
    bool no_pty = f.step == runtime::ExecStep::pty && f.err == ENOSPC;
    obs.failure = missing     ? "command not found: " + o.command
                  : exec_step ? "cannot execute " + o.command
                  : no_pty    ? "no terminal left: every pty of this session is in use"
                              : "cannot start the command (" + std::string(runtime::to_string(f.step)) + ")";
    obs.failure_errno = missing ? 0 : f.err;
    obs.failure_exit_code = exec_step ? (missing ? runtime::kExitNotFound : runtime::kExitCannotExec) : runtime::kExitFailed;
  }
  runtime::RunResult result = runtime::classify(obs);
  r.state = std::string(runtime::to_string(result.state));
  r.exit_code = result.exit_code ? std::optional<int64_t>(*result.exit_code) : std::nullopt;
  r.signal = result.signal ? std::optional<int64_t>(*result.signal) : std::nullopt;
  r.reason = result.reason;
  if (result.state == runtime::RunState::timed_out) {
    // classify() words a timeout for a whole run; here only the exec's tree ended.
    r.reason = "wall-clock timeout of " + format_duration(o.timeout_ms) + " reached; every process of the exec was killed";
    return;
  }
  if (o.start_failure || result.state == runtime::RunState::oom_killed) return;
  // The disk limit: a file past RLIMIT_FSIZE (SIGXFSZ), or a writable layer left full
  // (the command saw ENOSPC, whatever it exited with).
  if (r.signal && *r.signal == SIGXFSZ)
    r.reason = "killed by SIGXFSZ: a file reached the disk limit of " + format_size(o.disk_limit_bytes);
  else if (o.disk_full)
    r.reason += "; disk limit " + format_size(o.disk_limit_bytes) + " reached (the writable layer is full, writes failed with ENOSPC)";
  bool ended_normally = result.state == runtime::RunState::exited;
  if (o.session_ended && !o.wait_status) {
    // The main process had not ended when the session did: the session ended it.
    if (*o.session_ended == "init_died") {
      r.state = "failed";
      r.exit_code.reset();
      r.reason = "the session's init process died; the exec ended with it";
    } else {
      r.state = "killed";
      r.signal = SIGKILL;
      r.exit_code.reset();
      r.reason = "the session ended (" + *o.session_ended + ")" +
                 (o.session_message && !o.session_message->empty() ? ": " + *o.session_message : "");
    }
    return;
  }
  if (o.kill_signal && !ended_normally) {
    r.state = "killed";
    r.reason = "killed on request (" + sig_name(*o.kill_signal) +
               (*o.kill_signal == SIGKILL ? ")" : ", then SIGKILL after the grace period if needed)");
  }
}

}  // namespace cela::session
