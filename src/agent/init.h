// The sandbox's pid 1.
//
// run_init() is what the re-executed child runs. It finishes the sandbox from the inside
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
  // The program carries a watch (jail/seccomp.h SeccompWatch): init installs it with a
  // listener, which goes to the host with `ready`.
  bool listener = false;
  // The egress door (0 = none): init listens on 127.0.0.1:door_port inside the
  // session's network namespace and hands the listening socket to the host with
  // `ready`; the host's egress proxy accepts on it (net/egress_proxy.h). Init never
  // touches a byte of that traffic.
  uint16_t door_port = 0;
};

// Init's work once it has its config (run_init_reexec reads it).
[[noreturn]] void run_init(const InitConfig& config);

// Entry of every init: the cloned child re-executes cela from the sealed init image
// (jail/init_process.h) with argv = {kInitArgv0} and an empty environment, so nothing
// of the host binary, its command line or its environment shows inside. The first
// message on `control_fd` is `config` {hostname, shm_bytes, pty_max, door_port} carrying the seccomp
// program as a sealed memfd (agent/seccomp_program.h).
[[noreturn]] void run_init_reexec(int control_fd);

// The fd the re-executed init finds its control socket on.
inline constexpr int kReexecControlFd = 3;
// Init's whole argv (and so its /proc/1/cmdline inside); main() recognises init by it.
inline constexpr const char* kInitArgv0 = "cela-init";

}  // namespace cela::agent
