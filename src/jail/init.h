// The sandbox's pid 1.
//
// run_init() is what the cloned child runs. It finishes the sandbox from the inside
// (becomes user-namespace root, makes its mounts private, sets the hostname, brings
// loopback up, receives the prepared root filesystem from the host and pivots into
// it), then serves the control protocol (jail/protocol.h): it starts execs on request,
// reaps every zombie in the namespace, and reports exit statuses. When the host side
// goes away (control socket EOF) init exits, and the kernel kills every process left
// in the pid namespace.
#pragma once

#include <string>
#include <vector>

#include "jail/mounts.h"
#include "jail/seccomp.h"

namespace cela::jail {

struct InitConfig {
  int control_fd = -1;
  std::string hostname;
  RootfsSpec rootfs;
  const SeccompProgram* seccomp = nullptr;  // compiled by the host side before clone
  std::vector<int> cgroup_tasks_fds;        // v1 `tasks` files to join by writing "0"
};

[[noreturn]] void run_init(const InitConfig& config);

}  // namespace cela::jail
