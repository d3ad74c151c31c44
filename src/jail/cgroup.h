// Per-sandbox cgroups: limits, accounting, kill-all, removal, for v1 (legacy/hybrid)
// and v2 (unified) hosts. The host mode is detected once; everything that differs
// between the modes lives behind the Cgroup interface, chosen in one place
// (open_cgroup_host / CgroupHost::create).
//
// Every cgroup cela creates lives at an absolute path under a `cela` parent in each
// hierarchy (e.g. /sys/fs/cgroup/memory/cela/<name>): never relative to /proc/self/cgroup,
// which on this kind of host points into a cgroup cela does not own.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace cela::jail {

enum class CgroupMode {
  legacy,   // only v1 hierarchies
  hybrid,   // v1 controllers + a controller-less cgroup2 at <root>/unified
  unified,  // pure cgroup2 at <root>
};
std::string_view to_string(CgroupMode mode);

// Block I/O of one host block device (a whole disk: the kernel throttles disks, not
// partitions). 0 = no limit.
struct BlockDeviceLimit {
  uint32_t major = 0, minor = 0;
  uint64_t read_bps = 0, write_bps = 0, read_iops = 0, write_iops = 0;
  bool operator==(const BlockDeviceLimit&) const = default;
};

// Block I/O limits of every sandbox of a host, where the host offers them: a
// proportional weight (v2 io.weight, v1 blkio.weight or blkio.bfq.weight) and
// per-device throttles (v2 io.max, v1 blkio.throttle.*). A file the host lacks (no
// io/blkio controller, a scheduler without weights) is skipped: CgroupHost::io_support()
// says what applies.
struct IoLimits {
  uint32_t weight = 0;  // 0 = the kernel's default; else 1..10000 (v1 clamps to its range)
  std::vector<BlockDeviceLimit> devices;
  bool empty() const { return weight == 0 && devices.empty(); }
};

struct CgroupLimits {
  uint64_t memory_bytes = 0;  // 0 = unlimited; swap is always off when set
  double cpus = 0;            // hard ceiling in CPUs (quota/period); 0 = unlimited
  uint64_t pids = 0;          // 0 = unlimited
};

// How long freeze() waits for the kernel to report a freeze or a thaw.
inline constexpr std::chrono::milliseconds kFreezeTimeout{1000};
// How long a session's pause (runtime Instance::freeze, polled on the reactor: nothing
// waits on a thread) asks the kernel again before it gives up and thaws. Longer than
// kFreezeTimeout: a task asleep in an uninterruptible wait (a cgroup mutex held by
// another sandbox's mkdir or rmdir, page-cache I/O) freezes only once it wakes.
inline constexpr std::chrono::milliseconds kPauseTimeout{3000};

struct CgroupStats {
  uint64_t cpu_usage_ns = 0;
  uint64_t cpu_throttled_ns = 0;
  uint64_t memory_current_bytes = 0;
  uint64_t memory_peak_bytes = 0;
  uint64_t pids_current = 0;
  uint64_t pids_peak = 0;
  uint64_t oom_kills = 0;      // processes the kernel OOM-killed in this cgroup
  uint64_t pids_max_hits = 0;  // forks refused by pids.max (pids.events "max")
};

// One sandbox's cgroup (in every hierarchy the mode uses). Owned: the destructor
// calls destroy() if it was not called, logging a failure to stderr.
class Cgroup {
 public:
  virtual ~Cgroup() = default;
  virtual const std::string& name() const = 0;
  virtual Result<void> apply(const CgroupLimits& limits) = 0;
  // Moves `pid` (and only it) into this cgroup in every hierarchy.
  virtual Result<void> attach(pid_t pid) = 0;
  // For a child that joins by itself: write-only fds of every v1 hierarchy's `tasks`
  // file. A single-threaded process writing "0" to them moves itself without the
  // kernel's global threadgroup lock that cgroup.procs writes take (that lock's RCU
  // sync costs 10-20 ms per spawn). cgroup2 is joined at clone time instead
  // (clone3 CLONE_INTO_CGROUP with cgroup2_fd()) unless `include_cgroup2`, which adds
  // the cgroup2 node's cgroup.procs (slower, for children created by fork in init).
  virtual Result<std::vector<UniqueFd>> open_self_attach(bool include_cgroup2 = false) const = 0;
  virtual Result<CgroupStats> stats() const = 0;
  // True while any process is in the cgroup.
  virtual Result<bool> populated() const = 0;
  // Sends `sig` to every process in the cgroup (and its children), once; processes
  // forked meanwhile may be missed (use kill_all to end a tree for sure).
  virtual Result<void> signal_all(int sig) = 0;
  // SIGKILLs every process in the cgroup (cgroup.kill where it exists, else freeze,
  // signal, thaw — frozen tasks ignore SIGKILL until thawed).
  virtual Result<void> kill_all() = 0;
  // Freezes (true) or thaws (false) every process in the cgroup and waits (bounded by
  // kFreezeTimeout, polling every millisecond) until the kernel reports the new state.
  // v1: the freezer hierarchy (or, on hybrid hosts without it, the unified node); v2:
  // cgroup.freeze. A thread that must not wait (the session reactor) uses the two
  // halves below and polls on a timer instead.
  Result<void> freeze(bool frozen);
  // Writes the new state and returns at once (the kernel freezes asynchronously).
  virtual Result<void> request_freeze(bool frozen) = 0;
  // True once the kernel reports the state last requested: v1 freezer.state reads
  // FROZEN / THAWED (not FREEZING), v2 cgroup.events says `frozen 1` / `frozen 0`.
  virtual Result<bool> freeze_settled(bool frozen) const = 0;
  // kill_all, wait (bounded) until empty, rmdir in every hierarchy. Idempotent.
  virtual Result<void> destroy() = 0;
  // A child cgroup `name` (per-exec accounting and kill-all inside a session). It
  // lives under the parent's limits; the parent's destroy() removes leftover children
  // first. On hybrid hosts the child exists in the v1 hierarchies only (it is killed
  // through its v1 freezer); on v2 it has no controllers of its own (the parent holds
  // processes), so it reports CPU and kills, but no memory peak.
  virtual Result<std::unique_ptr<Cgroup>> create_child(const std::string& name) = 0;
  // A directory fd of the cgroup2 node (unified or hybrid's unified) for
  // clone3(CLONE_INTO_CGROUP), or -1 when the mode has none.
  virtual int cgroup2_fd() const = 0;
  // The directory, in one hierarchy, whose subtree lists every process of this cgroup
  // and of its children (v1: the memory hierarchy, which every child has; v2: the node).
  // Read with list_members(), from any thread (the path stays valid for the reader;
  // a removed cgroup simply lists nothing).
  virtual const std::string& process_dir() const = 0;
};

// One process found in a cgroup tree: its host pid and the child cgroup it is in,
// relative to the tree's top ("" = the top itself, "e-3", "e-3/x").
struct CgroupMember {
  pid_t pid = 0;
  std::string child;
};

// Every process of the cgroup at `dir` and of its children (cgroup.procs of each).
// A child removed while it is read counts as empty; a missing `dir` has none.
Result<std::vector<CgroupMember>> list_members(const std::string& dir);

// What of IoLimits this host's cgroups can enforce.
struct IoSupport {
  bool weight = false;    // a weight file exists (v1: blkio.weight or blkio.bfq.weight)
  bool throttle = false;  // per-device bandwidth and iops limits
};

// The host's cgroup layout, discovered once.
class CgroupHost {
 public:
  virtual ~CgroupHost() = default;
  virtual CgroupMode mode() const = 0;
  virtual IoSupport io_support() const = 0;
  // Creates <hierarchy>/cela/<name> everywhere (and the cela parents, enabling the
  // controllers in cela's subtree_control on v2). Fails if it already exists.
  virtual Result<std::unique_ptr<Cgroup>> create(const std::string& name) = 0;
  // Kills and removes a leftover cgroup <name> (from a runner that died). Missing is fine.
  virtual Result<void> remove_stale(const std::string& name) = 0;
  // Names of the cgroups currently under cela/ (any hierarchy).
  virtual Result<std::vector<std::string>> list() const = 0;
};

// The whole disk holding `path`'s filesystem ("major:minor" of /sys/dev/block, the
// parent disk for a partition); nullopt when it is not on a block device (tmpfs,
// overlay, btrfs subvolumes...). `sys` is the sysfs mount (tests point it elsewhere).
Result<std::optional<std::pair<uint32_t, uint32_t>>> whole_disk_of(const std::string& path,
                                                                    const std::string& sys = "/sys");

// Detects the mode from what is mounted at `root` (default /sys/fs/cgroup).
Result<CgroupMode> detect_cgroup_mode(const std::string& root = "/sys/fs/cgroup");

struct CgroupHostOptions {
  // Written into every sandbox's cgroup by create(). Empty, no block I/O cgroup is made
  // or controller enabled (one less hierarchy to create and remove per sandbox and exec).
  IoLimits io;
};

// The host backend for `mode`, with hierarchies under `root`. Tests point `root` at
// a temporary directory laid out like cgroupfs to exercise the file interface.
Result<std::unique_ptr<CgroupHost>> open_cgroup_host(CgroupMode mode,
                                                     const std::string& root = "/sys/fs/cgroup",
                                                     const CgroupHostOptions& options = {});

}  // namespace cela::jail
