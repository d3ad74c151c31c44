// The sandbox's pid 1.
//
// run_init() is what the cloned child runs. It finishes the sandbox from the inside
// (becomes user-namespace root, makes its mounts private, sets the hostname, brings
// loopback up, receives the prepared root filesystem from the host and pivots into
// it), then serves the control protocol (agent/protocol.h): it starts execs on request
// (agent/spawn.h), reaps every zombie in the namespace, and reports exit statuses. When the host side
// goes away (control socket EOF) init exits, and the kernel kills every process left
// in the pid namespace.
#pragma once

#include <string>
#include <vector>

#include "agent/rootfs.h"
#include "agent/seccomp_program.h"

namespace cela::agent {

struct InitConfig {
  int control_fd = -1;
  std::string hostname;
  RootfsSpec rootfs;
  const SeccompProgram* seccomp = nullptr;  // compiled by the host side before clone
};

// The cloned child runs this directly when the host side is single-threaded.
[[noreturn]] void run_init(const InitConfig& config);

// Entry of `cela __init` (the child re-executed itself, as a multi-threaded host side
// must: after clone only async-signal-safe calls are allowed until execve). The
// first message on `control_fd` is `config` {hostname, shm_bytes, pty_max} carrying the seccomp
// program as a sealed memfd (agent/seccomp_program.h).
[[noreturn]] void run_init_reexec(int control_fd);

// The fd the re-executed init finds its control socket on.
inline constexpr int kReexecControlFd = 3;

}  // namespace cela::agent
