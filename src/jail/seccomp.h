// The seccomp policy: a table (default deny, an allowlist in the spirit of Docker's
// default profile, the always-denied list of docs/security.md with their errnos and
// argument rules) compiled once with libseccomp into a classic BPF program. The
// program is built in the parent; the sandbox only installs it (agent/seccomp_program.h:
// no allocation, no libseccomp calls between fork and execve).
#pragma once

#include <linux/filter.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

#include "agent/seccomp_program.h"
#include "common/error.h"

namespace cela::jail {

// What the policy does with one syscall when nothing more specific matches.
struct SyscallRule {
  std::string name;
  enum class Action { allow, deny_eperm, deny_enosys } action;
};

// The policy tables, exposed for review and unit tests.
const std::vector<std::string>& seccomp_allowed_syscalls();
// Syscalls always denied, with the errno they fail with.
const std::vector<SyscallRule>& seccomp_denied_syscalls();
// Syscalls whose verdict depends on their arguments (clone without namespace flags,
// socket families, ioctl minus TIOCSTI/TIOCLINUX, personality). Never in the
// allowlist: an unconditional rule would override the argument rules.
const std::vector<std::string>& seccomp_argument_filtered_syscalls();

using agent::SeccompProgram;
using agent::install_seccomp;

// What the policy hands to a host-side listener as user notifications, instead of
// deciding alone (init installs the program with SECCOMP_FILTER_FLAG_NEW_LISTENER
// when either is set; jail/exec_notify.h answers).
//  - execs: every execve/execveat waits for the host, which records it and lets it go on.
//  - violations: every attempt at an always-denied syscall, or at a denied argument
//    case of clone, ioctl or personality, waits for the host, which counts it and
//    answers kViolationErrno. The kernel's own errno stays for what libc and runtimes
//    probe on their own and is no attempt at anything: ENOSYS (unknown syscalls,
//    clone3, Linux AIO) and EAFNOSUPPORT (socket families: sudo's libaudit asks for an
//    audit socket on every run).
// A notification whose listener is gone (the daemon died) fails with ENOSYS: nothing
// denied ever runs for want of an answer.
struct SeccompWatch {
  bool execs = false, violations = false;
  bool any() const { return execs || violations; }
};
inline constexpr int kViolationErrno = EPERM;

// Compiles the policy for the native architecture (other architectures, x32
// included, are killed). Unknown syscalls fail with ENOSYS so libc falls back.
Result<SeccompProgram> build_seccomp_program(SeccompWatch watch = {});

// build_seccomp_program() through a cache file under `cache_dir`, keyed by the
// identity of the running cela binary (device, inode, size, mtime): the policy is
// compiled into the binary, so a new binary means a new key. Compiling costs about
// 2 ms per spawn; loading the cached program a few microseconds. The directory must
// be writable by root only (the program decides what sandboxes may do). The cache holds
// the programs of the kSeccompCacheEntries builds that used it last, so builds
// sharing a host do not evict each other's.
inline constexpr size_t kSeccompCacheEntries = 8;
// Each watch has its own entry.
Result<SeccompProgram> cached_seccomp_program(SeccompWatch watch = {}, const std::string& cache_dir = "/run/cela");

}  // namespace cela::jail
