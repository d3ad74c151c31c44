// A session's processes (list, signal) and the sockets of its port proxy.
//
// The reactor only hands over what it owns: the runtime's process table (the cgroup
// tree, init's pidfd, which exec each child cgroup is) and, for a port, init's answer to
// `open_socket`. Reading /proc and signalling happen on the caller's thread (the API's
// blocking pool); connecting and relaying happen in the API layer.
#include <future>

#include "net/egress_proxy.h"
#include "session/manager.h"
#include "session/state.h"

namespace cela::session {

Result<SessionManager::ProcessView> SessionManager::process_view(const Caller& caller, const std::string& session_id) {
  std::promise<Result<ProcessView>> promise;
  auto f = promise.get_future();
  on_reactor([&] {
    auto found = find_live(caller, session_id);
    if (!found) return promise.set_value(std::unexpected(found.error()));
    Session& s = **found;
    if (!s.instance) return promise.set_value(fail(ErrorCode::gone, "session " + session_id + " has ended"));
    std::map<const runtime::ExecListener*, std::string> labels;
    for (const auto& [id, e] : s.execs) labels[e.get()] = id;
    auto table = s.instance->process_table(labels);
    if (!table) return promise.set_value(std::unexpected(table.error()));
    promise.set_value(ProcessView{std::move(*table), s.tmpl.user, s.redactions});
  });
  return f.get();
}

Result<std::vector<ProcessRecord>> SessionManager::processes(const Caller& caller, const std::string& session_id) {
  auto view = process_view(caller, session_id);
  if (!view) return std::unexpected(view.error());
  auto listed = view->table->list();
  if (!listed) return std::unexpected(listed.error());
  std::vector<ProcessRecord> out;
  for (const runtime::ProcessInfo& p : *listed) {
    ProcessRecord r;
    r.pid = p.pid;
    r.ppid = p.ppid;
    r.user = p.uid == 0 ? "root" : p.uid == view->user.uid ? view->user.name : std::to_string(p.uid);
    // As ps shows them: the arguments, or [comm] for a process without any (a zombie).
    for (const std::string& a : p.argv) r.cmd += (r.cmd.empty() ? "" : " ") + a;
    if (p.argv.empty()) r.cmd = "[" + p.name + "]";
    // A granted value in a command line is shown as the exec records show it.
    if (view->redactions && !view->redactions->empty()) r.cmd = view->redactions->redact(r.cmd);
    if (!p.exec.empty()) r.exec_id = p.exec;
    out.push_back(std::move(r));
  }
  return out;
}

Result<void> SessionManager::signal_process(const Caller& caller, const std::string& session_id, int64_t pid,
                                            int sig) {
  if (pid < 1 || pid > INT32_MAX) return fail(ErrorCode::not_found, "no process " + std::to_string(pid) + " in this session");
  auto view = process_view(caller, session_id);
  if (!view) return std::unexpected(view.error());
  return view->table->signal(static_cast<pid_t>(pid), sig);
}

void SessionManager::open_port(const Caller& caller, const std::string& session_id, uint16_t port,
                               Done<PortSocket> done) {
  on_reactor([this, caller, session_id, port, done = std::move(done)]() mutable {
    auto found = find_live(caller, session_id);
    if (!found) return done(std::unexpected(found.error()));
    std::shared_ptr<Session> session = *found;
    Session& s = *session;
    if (!running_or_later(s, [this, caller, session_id, port, done](Result<void> r) mutable {
          if (!r) return done(std::unexpected(r.error()));
          open_port(caller, session_id, port, std::move(done));
        }))
      return;
    if (!s.instance) return done(fail(ErrorCode::gone, "session " + session_id + " has ended"));
    // The door is the daemon's own listener (the egress proxy), not a server of the session.
    if (s.door && port == net::kDoorPort)
      return done(fail(ErrorCode::permission_denied, "port " + std::to_string(port) +
                                                         " is the session's egress door, not a server of the session"));
    auto count = s.port_connections;
    uint64_t cap = config_.ports.max_connections;
    if (count->fetch_add(1) >= cap) {
      count->fetch_sub(1);
      return done(fail(ErrorCode::quota_exceeded, "session " + session_id + " has " + std::to_string(cap) +
                                                      " proxied connections open, its limit"));
    }
    std::shared_ptr<void> lease(nullptr, [count](void*) { count->fetch_sub(1); });
    s.last_activity = Clock::now();
    s.instance->open_socket([done = std::move(done), lease](Result<UniqueFd> sock) mutable {
      if (!sock) return done(std::unexpected(sock.error()));
      done(PortSocket{std::move(*sock), std::move(lease)});
    });
  });
}

}  // namespace cela::session
