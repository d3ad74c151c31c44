// The jail backend of runtime/: namespaces + cgroups + seccomp + overlay rootfs
// (jail::Sandbox), with init re-executed as the sandbox's pid 1 because the daemon is
// multi-threaded. Control messages, init's death and every exec's output pipes are
// watched with Asio on the reactor the instance is attached to.
#pragma once

#include <memory>

#include "agent/protocol.h"
#include "runtime/runtime.h"

namespace cela::runtime {

// Detects the host's cgroup layout and compiles (or loads from the cache) the seccomp
// program every init and exec uses. Each instance holds one host uid slot
// (jail/userns.h) among the first `uid_slots`. The backend must outlive its instances.
Result<std::unique_ptr<Backend>> open_jail_backend(uint32_t uid_slots);

// The init protocol's exec request for a process spec (id 0: the caller numbers it).
agent::ExecRequest to_exec_request(const ProcessSpec& spec);

}  // namespace cela::runtime
