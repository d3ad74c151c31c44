// The host half of the execve watch (agent/exec_notify.h): take one notification from
// a session's listener, read what the process is about to execute, let it go on.
//
// The process is stopped inside execve while we read: its argv is read from its memory
// (process_vm_readv, as host root), its ids, parent and cgroup from /proc. The
// notification id is checked still valid after the reads, so a pid reused meanwhile is
// never reported. Nothing here waits on sandbox code: userfaultfd and FUSE are not
// available inside (docs/security.md "Process audit"), so reading a stopped process's
// memory and /proc entries does not block on it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"

namespace cela::jail {

struct ExecNotification {
  pid_t host_pid = 0;
  pid_t pid = 0, ppid = 0;    // inside the sandbox's pid namespace (0: unknown)
  uint32_t uid = 0, gid = 0;  // host ids (the caller subtracts the slot's base)
  std::string syscall;        // "execve" or "execveat"
  std::string path;           // as passed (relative to the cwd or the dirfd)
  std::vector<std::string> argv;
  bool truncated = false;     // argv longer than the bounds below
  std::string cgroup;         // the process's cgroup path (its exec's, where a hierarchy has it)
};

inline constexpr size_t kMaxNotifyArgs = 256;
inline constexpr size_t kMaxNotifyArgBytes = 4096;
inline constexpr size_t kMaxNotifyTotalBytes = 32 * 1024;

// Takes one pending notification from `listener` (call only when it polls readable:
// the receive then never blocks), answers it "continue", and describes it. nullopt
// when the process went away before or during the reads (nothing to report).
Result<std::optional<ExecNotification>> take_exec_notification(int listener);

}  // namespace cela::jail
