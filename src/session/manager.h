// SessionManager: where a request becomes a session, an exec, or a cleanup.
//
// Owns every live session of this daemon: its jail (jail::Sandbox, started by
// re-executing cela as init because the daemon is multi-threaded), its uid slot, its
// execs (each in its own child cgroup, so an exec's CPU, memory peak and kill cover
// exactly its process tree, setsid'd grandchildren included) and their captured
// output. One reactor thread (Asio) watches every session's control socket, init's
// pidfd, exec output pipes and all timers: exec timeouts, session TTL and idle
// timeout fire with no client connected. API threads call the public methods, which
// may block (session start waits for init's `ready`); they never run on the reactor.
//
// State lives in the Store; on start, recover() closes what a previous daemon left:
// live sessions become `terminated` with reason `daemon_restart` (their inits died
// with that daemon, which took their namespaces with them), their cgroups are
// removed, running exec records are closed. Only this state directory's sessions are
// touched, so several daemons can share a host.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/json/object.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "jail/cgroup.h"
#include "jail/seccomp.h"
#include "rootfs/template.h"
#include "session/config.h"
#include "session/session_fs.h"
#include "store/store.h"

namespace cela::session {

// Who is asking: every lookup is scoped to the tenant (another tenant's id is
// not_found, never forbidden).
struct Caller {
  std::string tenant_id;
  bool admin = false;
};

// Receives an exec's output as it is produced. Called on the reactor thread with
// the session locked: must not block (queue and return).
class OutputSubscriber {
 public:
  virtual ~OutputSubscriber() = default;
  // `offset` is the stream's byte offset after this chunk.
  virtual void on_output(std::string_view stream, uint64_t offset, std::string_view data) = 0;
  virtual void on_exit(const boost::json::object& exec_record) = 0;
  // True once the consumer is gone; the subscriber is then dropped.
  virtual bool closed() const = 0;
};

struct ExecOutput {
  std::string stdout_data, stderr_data;
  bool truncated = false;
};

class Session;

class SessionManager {
 public:
  static Result<std::unique_ptr<SessionManager>> open(const DaemonConfig& config, store::Store& store);
  ~SessionManager();  // terminates every live session (reason "daemon_shutdown")

  // Closes what a previous daemon left behind; returns how many sessions it closed.
  Result<int64_t> recover();

  // Validates `body` (API.md session create), checks capacity and quotas (waiting up
  // to `wait` for capacity), starts the jail and returns once init is ready.
  Result<boost::json::object> create(const Caller& caller, const boost::json::object& body,
                                     std::chrono::seconds wait);
  Result<boost::json::object> get(const Caller& caller, const std::string& id);
  Result<boost::json::object> list(const Caller& caller, const store::SessionFilter& filter,
                                   const store::PageRequest& page);
  Result<boost::json::object> patch(const Caller& caller, const std::string& id, const boost::json::object& body);
  // Idempotent: a second delete answers the same final record.
  Result<boost::json::object> remove(const Caller& caller, const std::string& id);

  // Starts an exec (API.md exec body); answers {"id", "state": "running"}.
  Result<boost::json::object> start_exec(const Caller& caller, const std::string& session_id,
                                         const boost::json::object& body);
  Result<boost::json::object> get_exec(const Caller& caller, const std::string& session_id,
                                       const std::string& exec_id);
  Result<ExecOutput> exec_output(const Caller& caller, const std::string& session_id, const std::string& exec_id);
  // Replays output past the given offsets, then streams live until the exec ends
  // (on_exit) -- no byte lost or repeated across a resume.
  Result<void> follow_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                           uint64_t stdout_from, uint64_t stderr_from, std::shared_ptr<OutputSubscriber> subscriber);
  Result<void> write_stdin(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                           std::string_view data, bool close);
  // SIGTERM (or `signal`) to the exec's whole tree, SIGKILL after `grace`.
  Result<boost::json::object> kill_exec(const Caller& caller, const std::string& session_id,
                                        const std::string& exec_id, int signal, std::chrono::milliseconds grace);
  // start_exec + wait for the end; answers the record with its output.
  Result<boost::json::object> run(const Caller& caller, const std::string& session_id,
                                  const boost::json::object& body);

  // A path-safe view of the session's filesystem (files API).
  Result<std::shared_ptr<SessionFs>> files(const Caller& caller, const std::string& session_id);

  int64_t live_sessions() const;
  const DaemonConfig& config() const { return config_; }

 private:
  SessionManager(const DaemonConfig& config, store::Store& store);
  // The live session `id` of any tenant, or null (callers check the tenant first).
  std::shared_ptr<Session> live_session(const std::string& id) const;
  Result<std::shared_ptr<Session>> find_live(const Caller& caller, const std::string& id);
  void terminate(const std::shared_ptr<Session>& session, std::string state, std::string reason,
                 std::string message);
  void watch(const std::shared_ptr<Session>& session);
  void on_control(const std::shared_ptr<Session>& session);
  void arm_session_timer(const std::shared_ptr<Session>& session);
  void release_capacity();

  DaemonConfig config_;
  store::Store& store_;
  rootfs::TemplateStore templates_;
  std::unique_ptr<jail::CgroupHost> cgroups_;
  jail::SeccompProgram seccomp_;

  boost::asio::io_context reactor_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::thread reactor_thread_;

  mutable std::mutex mu_;
  std::condition_variable capacity_cv_;
  int64_t reserved_ = 0;  // sessions starting or live
  std::map<std::string, std::shared_ptr<Session>> sessions_;
};

// Maps an Error from this layer to the session's terminal view (for API layers).
std::string termination_message(const store::SessionRecord& record);

}  // namespace cela::session
