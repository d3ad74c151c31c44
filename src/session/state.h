// The reactor-only state of live sessions and their execs (internal to session/).
// Nothing here is touched off the reactor thread: SessionManager::assert_on_reactor().
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "net/policy.h"
#include "rootfs/template.h"
#include "runtime/runtime.h"
#include "session/admission.h"
#include "session/exec_outcome.h"
#include "session/output.h"
#include "session/secret_grants.h"
#include "session/types.h"
#include "store/records.h"

namespace cela::session {

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
  Clock::time_point started_at;
  ExecObservation observed;
  std::unique_ptr<boost::asio::steady_timer> start_timer, timeout, grace, linger;
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

  int running_execs() const {
    int n = 0;
    for (auto& [id, e] : execs) n += !e->finished;
    return n;
  }
};

}  // namespace cela::session
