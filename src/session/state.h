// The reactor-only state of live sessions and their execs (internal to session/).
// Nothing here is touched off the reactor thread: SessionManager::assert_on_reactor().
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <atomic>
#include <chrono>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/token_bucket.h"
#include "net/policy.h"
#include "rootfs/template.h"
#include "runtime/runtime.h"
#include "session/admission.h"
#include "session/exec_outcome.h"
#include "session/observe.h"
#include "session/output.h"
#include "session/pool.h"
#include "session/secret_grants.h"
#include "session/types.h"
#include "store/records.h"

namespace cela::session {

// A session's seccomp.violation audit records: the first kViolationRecordBurst one by
// one, then one a second; every violation is still counted (metrics, exec.end,
// session.terminate) and those not recorded are summed into the next record, so a
// sandbox probing denied syscalls in a loop cannot flood the audit.
inline constexpr double kViolationRecordsPerSecond = 1, kViolationRecordBurst = 32;

using Clock = std::chrono::steady_clock;
class SessionManager;
struct Session;

// One exec: its record, its runtime handle, its output pipeline and what ended it.
struct ExecState final : runtime::ExecListener {
  ExecState(SessionManager& m, Session& s) : manager(m), session(s) {}

  SessionManager& manager;
  Session& session;  // owns this exec
  store::ExecRecord record;
  std::unique_ptr<runtime::Exec> exec;
  std::unique_ptr<OutputPipeline> output;
  bool started = false, finished = false;
  bool out_eof = false, err_eof = false;
  std::string pending_stdin;
  bool close_stdin_after = true;
  bool stdin_closed = false;  // POST …/stdin?close=1 was asked
  uint64_t timeout_ms = 0;
  // What live_execs shows besides the record: the spec's own env (redacted), its tag.
  std::vector<std::string> env;
  std::string tag;
  bool tty = false;
  Clock::time_point started_at;
  ExecObservation observed;
  // The session's counters when the exec started (limit events are their deltas) and
  // its wall-clock start (files written since).
  std::optional<runtime::Stats> session_at_start;
  int64_t started_wall_ms = 0;
  uint64_t processes = 0;  // programs executed in it (process.exec)
  uint64_t violations = 0;  // denied syscalls its processes attempted (seccomp.violation)
  // The template's start command (session/start_command.cc): a server that runs for
  // the session's life, so it does not hold the idle clock.
  bool service = false;
  std::unique_ptr<boost::asio::steady_timer> start_timer, timeout, grace, linger;
  // While the session is paused, the start and timeout timers are stopped and what was
  // left of them kept here (session/pause.cc): a frozen exec's time does not run out.
  std::optional<Clock::duration> start_left, timeout_left;
  // Waiting for the start (POST …/execs) and for the end (…/run).
  std::vector<Done<store::ExecRecord>> on_start, on_end;

  void on_started(pid_t pid_inside) override;
  void on_start_failed(const runtime::StartFailure& failure) override;
  void on_output(runtime::Stream stream, std::string_view data) override;
  void on_output_end(runtime::Stream stream) override;
  void on_exited(int wait_status) override;

  // The record with live byte counts.
  store::ExecRecord snapshot() const;
};

struct Session {
  store::SessionRecord record;
  rootfs::Template tmpl;
  SessionLimits limits;
  HostGrant grant;  // held in Admission from admission to the end
  std::vector<std::string> env;
  bool allow_sudo = false;
  // The egress door (network allowlist, or a service such as the package gateway
  // needs it) and what it lets through.
  bool door = false;
  net::EgressPolicy egress;
  std::optional<net::PackagePolicy> packages;  // when the create asked for `packages`
  std::unique_ptr<runtime::Instance> instance;
  // Made on the first upload and kept (its cgroup descriptors are opened once).
  std::shared_ptr<runtime::WriterLauncher> writers;
  std::map<std::string, std::shared_ptr<ExecState>> execs;
  // Secret grants and the redaction of their values (for the session's whole life,
  // also after a grant expired: copies may still be printed).
  std::vector<SecretGrant> secrets;
  std::shared_ptr<const obs::Redactions> redactions;
  FilePolicy files;
  std::unique_ptr<boost::asio::steady_timer> timer;
  Clock::time_point expires, last_activity;
  bool ended = false;
  // Frozen while its writable layer is copied; a pause or resume waits in after_freeze.
  bool snapshotting = false;
  // What the runtime was asked for (reset boots it again), and whether a reset is
  // between its teardown and the new init (the session has no instance then).
  runtime::InstanceSpec instance_spec;
  bool resetting = false;
  // A disk layer being released off the reactor after the end; what waits for it (a
  // DELETE answers once the cleanup report can say the loop device let go).
  bool disk_pending = false;
  std::vector<std::function<void()>> after_release;
  // Pause (session/pause.cc). `pausing` and `resuming` last until the kernel reports the
  // freezer's new state; calls arriving meanwhile wait in after_freeze and run again.
  enum class Freeze { running, pausing, paused, resuming } freeze = Freeze::running;
  std::vector<std::function<void()>> after_freeze;
  uint64_t auto_pause_s = 0;
  bool auto_resume = false;
  // pause_at_ttl (types.h); `parked` once its TTL paused it and gave it the paused
  // lease (until a new TTL is set): the next expiry ends it.
  bool pause_at_ttl = false;
  bool parked = false;
  // While it waits in a warm pool (session/pool.cc): booted, never given code, no
  // tenant, not in the live map. nullptr for every session callers can see.
  WarmPool* pool = nullptr;
  // Observability (session/observe.cc): limits hit, the sampled history and its timer.
  std::vector<LimitEvent> limit_events;
  std::deque<MetricSample> history;
  std::unique_ptr<boost::asio::steady_timer> sampler;
  Clock::time_point created_at = Clock::now();
  uint64_t processes = 0;
  // Denied syscalls attempted inside, each counted; recorded one by one only within
  // the record budget (observe_violation), the rest summed into the next record.
  uint64_t violations = 0, violations_unrecorded = 0;
  TokenBucket violation_records{kViolationRecordsPerSecond, kViolationRecordBurst};
  uint64_t oom_kills = 0;  // seen by its execs (v1 counts them in the exec's own cgroup)
  // Proxied port connections open now (session/processes.cc); each PortSocket's lease
  // holds one, and gives it back from whatever thread drops it.
  std::shared_ptr<std::atomic<uint64_t>> port_connections = std::make_shared<std::atomic<uint64_t>>(0);

  int running_execs() const {
    int n = 0;
    for (auto& [id, e] : execs) n += !e->finished && !e->service;
    return n;
  }
};

}  // namespace cela::session
