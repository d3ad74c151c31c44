// The host half of the seccomp watch (jail/seccomp.h SeccompWatch): take one
// notification from a session's listener, read who made it, answer it.
//
// Two kinds arrive. An execve/execveat is read (its argv from the process's memory,
// with process_vm_readv as host root) and let go on. Anything else is a violation: an
// attempt at a syscall the policy denies, answered kViolationErrno, never "continue";
// the answer depends only on the syscall number the kernel reports, so nothing the
// sandbox writes can turn a denial into a pass. The process waits inside its syscall
// while its ids, parent and cgroup are read from /proc; the notification id is checked
// still valid after the reads, so a pid reused meanwhile is never reported. Nothing
// here waits on sandbox code: userfaultfd and FUSE are not available inside
// (docs/security.md "Process audit"), so reading a stopped process's memory and /proc
// entries does not block on it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <array>
#include <optional>
#include <string>
#include <variant>
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

// A denied syscall the policy reported (answered kViolationErrno).
struct ViolationNotification {
  pid_t host_pid = 0;
  pid_t pid = 0;              // inside the sandbox's pid namespace (0: unknown)
  uint32_t uid = 0, gid = 0;  // host ids
  int nr = -1;
  std::string syscall;        // its name, or "syscall <nr>" for one libseccomp does not know
  std::array<uint64_t, 6> args{};
  std::string cgroup;
};

using Notification = std::variant<ExecNotification, ViolationNotification>;

inline constexpr size_t kMaxNotifyArgs = 256;
inline constexpr size_t kMaxNotifyArgBytes = 4096;
inline constexpr size_t kMaxNotifyTotalBytes = 32 * 1024;

// Takes one pending notification from `listener` (call only when it polls readable:
// the receive then never blocks), answers it (execs continue, everything else fails
// with kViolationErrno) and describes it. nullopt when the process went away before or
// during the reads (nothing to report).
Result<std::optional<Notification>> take_notification(int listener);

}  // namespace cela::jail
