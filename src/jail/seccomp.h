// The seccomp policy: a table (default deny, an allowlist in the spirit of Docker's
// default profile, the always-denied list of docs/security.md with their errnos and
// argument rules) compiled once with libseccomp into a classic BPF program. The
// program is built in the parent; the sandbox only installs it (agent/seccomp_program.h:
// no allocation, no libseccomp calls between fork and execve).
#pragma once

#include <linux/filter.h>

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

// Compiles the policy for the native architecture (other architectures, x32
// included, are killed). Unknown syscalls fail with ENOSYS so libc falls back.
Result<SeccompProgram> build_seccomp_program();

// build_seccomp_program() through a cache file under `cache_dir`, keyed by the
// identity of the running cela binary (device, inode, size, mtime): the policy is
// compiled into the binary, so a new binary means a new key. Compiling costs about
// 2 ms per spawn; loading the cached program a few microseconds. The directory must
// be writable by root only (the program decides what sandboxes may do). The cache holds
// the programs of the kSeccompCacheEntries builds that used it last, so builds
// sharing a host do not evict each other's.
inline constexpr size_t kSeccompCacheEntries = 8;
Result<SeccompProgram> cached_seccomp_program(const std::string& cache_dir = "/run/cela");

}  // namespace cela::jail
