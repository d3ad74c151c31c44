// The jail backend of runtime/: namespaces + cgroups + seccomp + overlay rootfs
// (jail::Sandbox), with init re-executed as the sandbox's pid 1 because the daemon is
// multi-threaded. Control messages, init's death and every exec's output pipes are
// watched with Asio on the reactor the instance is attached to.
#pragma once

#include <memory>

#include "jail/cgroup.h"
#include "jail/seccomp.h"
#include "runtime/runtime.h"

namespace cela::runtime {

// `cgroups` and `seccomp` must outlive the backend and every instance.
std::unique_ptr<Backend> make_jail_backend(jail::CgroupHost& cgroups, const jail::SeccompProgram& seccomp);

}  // namespace cela::runtime
