// Sandbox: the host-side handle of one jail (namespaces + cgroup + rootfs + init).
//
// start() clones the init child into new user, mount, pid, uts, ipc and net
// namespaces (it enters its cgroup namespace itself once attached) from a short-lived
// launcher whose effective uid is the slot's host uid, so that uid owns the user
// namespace and the kernel's per-user budgets are the session's own (userns.h); maps
// its ids to the slot's host range, attaches it to a fresh cgroup, prepares the root filesystem
// from the host side and hands it over, and returns once init reports `ready` (or the
// step and errno that failed). Execs then start through init (agent/protocol.h).
//
// Ownership: the Sandbox owns the init process (pidfd), the control socket and the
// cgroup. destroy() -- or the destructor -- kills init (the pid namespace and all its
// processes die with it) and removes the cgroup. The mounts need no cleanup: they
// exist only in the sandbox's mount namespace.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "common/error.h"
#include "common/fd.h"
#include "jail/cgroup.h"
#include "jail/mounts.h"
#include "agent/protocol.h"
#include "jail/seccomp.h"
#include "jail/userns.h"

namespace cela::jail {

struct SandboxSpec {
  std::string name;      // cgroup name under cela/ (unique among live sandboxes)
  std::string hostname;  // inside the sandbox
  RootfsSpec rootfs;
  CgroupLimits limits;
  uint32_t host_uid_base = 0;  // host uid that is root inside and owns the user namespace
  KernelBudgets budgets;
  // A disk-backed writable layer (jail/disk.h), held by the caller for the sandbox's
  // life; -1: a tmpfs sized by rootfs.disk_bytes.
  int disk_root = -1;
  std::vector<VolumeBind> volumes;  // their mounts held by the caller
  // The seccomp program carries a watch (jail/seccomp.h SeccompWatch): init installs it
  // with a listener and hands that over (listener_fd()).
  bool listener = false;
  // Non-zero: init listens on 127.0.0.1:door_port inside and hands over the listener
  // (take_door()), the egress door (agent/init.h).
  uint16_t door_port = 0;
};

struct StartedExec {
  uint64_t id = 0;
  pid_t pid = 0;  // inside the sandbox's pid namespace
  UniqueFd stdin_w, stdout_r, stderr_r;
};

// Why an exec failed to start (ENOENT at execve: command not found).
struct ExecStartError {
  std::string step;
  int err = 0;
};

struct TeardownReport {
  uint64_t processes_killed = 0;
  bool cgroup_removed = false;
};

class Sandbox {
 public:
  // The caller may be multi-threaded: the cloned child re-executes cela as init from
  // the sealed init image (jail/init_process.h) before it does anything else.
  // `sealed_seccomp`: the policy as a sealed memfd (agent::seal_seccomp_program), one
  // for every sandbox of a backend (init reads it with pread: no shared offset).
  static Result<std::unique_ptr<Sandbox>> start(const SandboxSpec& spec, CgroupHost& cgroups,
                                                int sealed_seccomp);
  ~Sandbox();
  Sandbox(const Sandbox&) = delete;
  Sandbox& operator=(const Sandbox&) = delete;

  // Starts an exec; returns once init reports it started. An exec that could not
  // start (bad cwd, command not found) yields ExecStartError in the Error's context
  // as "<step>" with its errno.
  Result<StartedExec> exec(agent::ExecRequest request);

  // Sends an exec request without waiting for its reply (for an event loop that reads
  // the control socket itself); `fds` ride along (cgroup files the exec joins).
  Result<void> send_exec(const agent::ExecRequest& request, const std::vector<int>& fds = {});
  // Asks init to signal the process group of exec `id`.
  Result<void> signal_exec(uint64_t id, int sig);
  // Asks init for a TCP socket in the sandbox's network namespace; the answer is a
  // `socket` event with the same ref.
  Result<void> request_socket(uint64_t ref);

  // The control socket: poll it, then next_event() returns one message (`exited`,
  // ...). EOF means init died. A message whose descriptors the caller had no room for
  // comes whole, with fds_truncated set.
  int control_fd() const { return control_.get(); }
  Result<agent::Message> next_event();
  // Readable (POLLIN) when init has exited.
  int pidfd() const { return pidfd_.get(); }
  pid_t init_pid() const { return init_pid_; }
  // The writable layer's upper directory as the host sees it (snapshots); -1 after
  // destroy().
  int upper_fd() const { return upper_.get(); }
  // The policy's listener (SandboxSpec::listener), -1 without one.
  int listener_fd() const { return listener_.get(); }
  Cgroup& cgroup() { return *cgroup_; }
  std::chrono::microseconds startup_time() const { return startup_; }
  // The egress door's listening socket, once (empty without SandboxSpec::door_port).
  UniqueFd take_door() { return std::move(door_); }

  // SIGKILL to init and to every process in the cgroup; does not wait.
  void kill();
  // kill(), then wait until init -- and so every process of the sandbox -- is gone.
  void kill_and_reap();
  // kill_and_reap(), remove the cgroup. Idempotent.
  Result<TeardownReport> destroy();

 private:
  Sandbox() = default;
  Result<agent::Message> wait_for(agent::MessageType type, uint64_t id);
  // Reaps init after it closed the control socket during setup; says why it died.
  Error died_during_setup();

  pid_t init_pid_ = -1;
  UniqueFd pidfd_;
  UniqueFd control_;
  UniqueFd upper_;
  UniqueFd listener_;
  UniqueFd door_;
  std::unique_ptr<Cgroup> cgroup_;
  std::deque<agent::Message> pending_;  // events that arrived while waiting for a reply
  uint64_t next_exec_id_ = 1;
  bool reaped_ = false;
  bool destroyed_ = false;
  std::chrono::microseconds startup_{0};
};

}  // namespace cela::jail
