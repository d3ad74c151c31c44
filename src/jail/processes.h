// The processes of one sandbox as the sandbox sees them: found through its cgroup tree
// (never a scan of all of /proc), named by their pids inside its pid namespace, their
// ids mapped back through its uid slot; and signals to one of them through a pidfd.
//
// A process counts as the sandbox's when it is in the sandbox's cgroup tree AND in a
// pid namespace below the daemon's (NSpid has an entry at the sandbox's level): the
// daemon's own helpers in the session's cgroups (upload writers, archive imports) live
// in the host's pid namespace and are never listed or signalled.
//
// Thread-safe and blocking (it reads /proc): use it off the reactor. It holds a pidfd of
// the sandbox's init, so a sandbox that ended meanwhile lists nothing (its cgroup is
// gone) rather than someone else's processes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace cela::jail {

// What /proc/<pid>/status says of a process (the fields used here).
struct ProcStatus {
  std::string name;           // Name: (comm)
  std::vector<pid_t> nspid;   // NSpid: outermost (the reader's namespace) first
  pid_t ppid = 0;             // PPid:, in the reader's namespace
  uint32_t euid = 0;          // the effective id of Uid:, in the reader's user namespace
};
// invalid_argument when a field is missing or malformed.
Result<ProcStatus> parse_proc_status(std::string_view text);
// /proc/<pid>/cmdline's NUL-separated arguments (a trailing NUL ends the last one; a
// process that rewrote its argv into one string with spaces gives one argument).
std::vector<std::string> split_cmdline(std::string_view raw);

// The uid the sandbox sees for host uid `host`, given its slot's base (the 65536 ids
// from base); an id outside the slot shows as the overflow uid 65534, as the kernel
// shows unmapped ids inside.
uint32_t inside_uid(uint32_t host, uint32_t base);

struct SandboxProcess {
  pid_t pid = 0;   // inside the sandbox's pid namespace (init is 1)
  pid_t ppid = 0;  // inside; 0 for init (its parent is outside)
  uint32_t uid = 0;  // effective, inside
  std::vector<std::string> argv;  // empty for a zombie
  std::string name;               // comm (what to show when argv is empty)
  std::string cgroup;             // the child cgroup it is in ("" = the sandbox's own)
};

class SandboxProcesses {
 public:
  // `cgroup_dir`: Cgroup::process_dir() of the sandbox's cgroup; `init_pidfd` a pidfd
  // of its init (taken over); `uid_base`: its slot's first host uid.
  SandboxProcesses(std::string cgroup_dir, pid_t init_host_pid, UniqueFd init_pidfd, uint32_t uid_base);

  // Every process of the sandbox, in pid order inside. gone when the sandbox has ended.
  Result<std::vector<SandboxProcess>> list() const;
  // Sends `sig` to the process that is `pid` inside: permission_denied for init (pid 1),
  // not_found for a pid that is no process of this sandbox (another session's, the
  // host's, a helper's). The pid is resolved through the cgroup tree, a pidfd opened,
  // and the process checked to be in the tree still before the signal goes out through
  // the pidfd: a pid reused meanwhile is never signalled.
  Result<void> signal(pid_t pid, int sig) const;

 private:
  struct Found {
    pid_t host_pid = 0;
    ProcStatus status;
    std::string cgroup;
  };
  Result<std::vector<Found>> members() const;
  Result<void> check_alive() const;

  std::string dir_;
  pid_t init_host_pid_;
  UniqueFd init_pidfd_;
  uint32_t uid_base_;
  size_t level_;  // index of the sandbox's pid in NSpid (the daemon's own depth)
};

}  // namespace cela::jail
