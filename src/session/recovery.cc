// Recovery at daemon start: closes what a previous daemon of this state directory left.
// Its inits died with it (PR_SET_PDEATHSIG), taking their namespaces along; what
// remains is cgroups and records. Only this state dir's sessions are touched, so
// several daemons can share a host.
#include <cstdio>
#include <future>

#include "obs/audit.h"
#include "session/manager.h"

namespace cela::session {

Result<int64_t> SessionManager::recover() {
  std::promise<Result<int64_t>> promise;
  auto f = promise.get_future();
  on_reactor([&] {
    auto live = store_.live_sessions();
    if (!live) return promise.set_value(std::unexpected(live.error()));
    for (const store::SessionRecord& s : *live) {
      CleanupReport cleanup;  // processes_killed unknown: they died with the old daemon
      cleanup.cgroup_removed = cleanup.mounts_removed = cleanup.upper_dir_freed = true;
      // A disk-backed layer's image was never linked and its loop device clears
      // itself; the backend's opening checked every device this state dir recorded
      // (runtime/storage.h DiskPool::open) before this runs.
      if (s.spec.disk_kind == "disk") cleanup.loop_detached = true;
      if (auto r = backend_->remove_stale(s.id); !r) {
        std::fprintf(stderr, "cela: recover: cgroup of %s: %s\n", s.id.c_str(), r.error().message().c_str());
        cleanup.cgroup_removed = false;
      }
      bool starting = s.state == store::session_state::starting;
      const char* state = starting ? "failed" : "terminated";
      const char* message = starting ? "the daemon restarted while the session was starting"
                                     : "the daemon restarted; the session's processes ended with it";
      (void)store_.set_terminated(s.id, state, "daemon_restart", message, cleanup);
      // Its end is in the audit like any other (the old daemon could not write it).
      obs::audit("session.terminate", {s.tenant_id, s.id, ""},
                 {{"state", state}, {"reason", "daemon_restart"}, {"message", message}, {"recovered", true},
                  {"clean", cleanup.cgroup_removed}});
    }
    (void)store_.close_running_execs("the daemon restarted while the exec was running");
    // Warm pools' sandboxes: never claimed, so nothing to record; only their cgroups.
    if (auto pooled = store_.pooled_ids(); pooled) {
      for (const std::string& id : *pooled) {
        if (auto r = backend_->remove_stale(id); !r)
          std::fprintf(stderr, "cela: recover: cgroup of pooled %s: %s\n", id.c_str(), r.error().message().c_str());
        (void)store_.remove_pooled(id);
      }
    } else {
      std::fprintf(stderr, "cela: recover: pooled sessions: %s\n", pooled.error().message().c_str());
    }
    promise.set_value(static_cast<int64_t>(live->size()));
  });
  return f.get();
}

}  // namespace cela::session
