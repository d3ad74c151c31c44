// A compiled seccomp program as the sandbox side sees it: classic BPF instructions,
// installed by init on itself once its setup is done, so every exec forks under it. The policy and its compilation
// live on the host side (jail/seccomp.h); the program reaches a re-executed init as a
// sealed memfd in its config message, so init never compiles or reads host files.
#pragma once

#include <linux/filter.h>

#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace cela::agent {

struct SeccompProgram {
  std::vector<sock_filter> instructions;
};

// The program from its raw bytes (a whole number of instructions, at least one, at
// most BPF_MAXINSNS).
Result<SeccompProgram> seccomp_program_from_bytes(std::string_view bytes);

// A read-only, sealed memfd holding `program`, for passing to init.
Result<UniqueFd> seal_seccomp_program(const SeccompProgram& program);
// Reads the program back from such an fd.
Result<SeccompProgram> read_seccomp_program(int fd);

// Installs `program` on the calling thread (prctl SECCOMP_MODE_FILTER).
// Async-signal-safe. Requires no_new_privs or CAP_SYS_ADMIN in the current user ns.
// Returns 0 or an errno.
int install_seccomp(const SeccompProgram& program);

// The same, returning the filter's user-notification listener (close-on-exec): for a
// program built with a watch (jail/seccomp.h SeccompWatch), whose notifications only
// the holder of this fd answers.
Result<UniqueFd> install_seccomp_with_listener(const SeccompProgram& program);

}  // namespace cela::agent
