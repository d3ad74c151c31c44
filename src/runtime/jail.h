// The jail backend of runtime/: namespaces + cgroups + seccomp + overlay rootfs
// (jail::Sandbox), with init re-executed as the sandbox's pid 1 because the daemon is
// multi-threaded. Control messages, init's death and every exec's output pipes are
// watched with Asio on the reactor the instance is attached to.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agent/protocol.h"
#include "jail/cgroup.h"
#include "jail/seccomp.h"
#include "jail/userns.h"
#include "runtime/runtime.h"

namespace cela::runtime {

// The most host uid slots a jail backend can use (jail/userns.h).
inline constexpr uint32_t kMaxUidSlots = jail::kMaxSlots;

// What every sandbox of a jail backend gets, whatever its session asks for.
struct JailOptions {
  uint32_t uid_slots = jail::kMaxSlots;  // host uid slots this backend may take
  jail::KernelBudgets budgets;           // rlimits and /proc/sys/user limits
  uint32_t pty_max = 64;                 // the private devpts's max=
  jail::IoLimits io;                     // block I/O weight and per-disk throttles
  DiskPoolOptions disks;                 // disk-backed writable layers
  // What the seccomp policy hands to the daemon: execs (Instance::on_process) and
  // violations (Instance::on_violation).
  jail::SeccompWatch watch;
  // Helpers will run in instances (file imports, watches: Instance::spawn_helper):
  // their sealed image (a copy of cela) is made when the backend opens, not on first use.
  bool helpers = false;
};

// Detects the host's cgroup layout and compiles (or loads from the cache) the seccomp
// program every init and exec uses. Each instance holds one host uid slot
// (jail/userns.h) among the first `options.uid_slots`. Fails on user namespace limits
// the kernel does not name. The backend must outlive its instances.
Result<std::unique_ptr<Backend>> open_jail_backend(const JailOptions& options);

// Block I/O limits as an operator states them: one weight, throttles for the disks
// holding `paths`.
struct BlockIoRequest {
  uint32_t weight = 0;
  uint64_t read_bps = 0, write_bps = 0, read_iops = 0, write_iops = 0;
  std::vector<std::string> paths;
};

// The IoLimits for `request` on this host. `notes` gets a line for each part this host
// cannot enforce (no io/blkio controller, no weight file, a path on no block device),
// which is then left out.
Result<jail::IoLimits> resolve_block_io(const BlockIoRequest& request, std::vector<std::string>& notes);

// The init protocol's exec request for a process spec (id 0: the caller numbers it).
agent::ExecRequest to_exec_request(const ProcessSpec& spec);

}  // namespace cela::runtime
