// Cgroup v1 backend (legacy and hybrid hosts). Limits and accounting live in the v1
// memory, cpu, cpuacct and pids hierarchies (and blkio where mounted), each at
// <hierarchy>/cela/<name>. Kill-all
// and "populated" go through the hybrid host's controller-less cgroup2 node
// (<root>/unified/cela/<name>: cgroup.kill, cgroup.events) when there is one, else
// through the v1 freezer.
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <csignal>
#include <cstdlib>

#include "common/fs.h"
#include <fcntl.h>

#include "jail/cgroup_backends.h"

namespace cela::jail {
namespace {

using namespace cgroupfs;

// Where each controller's hierarchy is mounted, resolved through symlinks: cpu and
// cpuacct are often one hierarchy (/sys/fs/cgroup/cpu -> cpu,cpuacct).
struct V1Layout {
  std::string memory, cpu, cpuacct, pids, freezer;  // cpuacct, freezer: empty if not mounted
  std::string blkio;                                // empty if not mounted or not wanted
  std::string unified;                              // hybrid only
  std::vector<std::string> hierarchies;             // the distinct v1 mounts used
  // A mounted blkio hierarchy this host does not use: still searched for leftovers (a
  // cela configured with block I/O limits may have made cgroups there).
  std::string unused_blkio;
};

// One cgroup's directory in every hierarchy of a V1Layout.
struct V1Paths {
  std::string memory, cpu, cpuacct, pids, freezer, blkio, unified;  // empty when not used
  std::vector<std::string> all;  // every distinct directory, v1 ones then unified
};

// v1 charges socket buffers (TCP, UDP: everything the kernel accounts as socket
// memory) to a cgroup only once its memory.kmem.tcp.limit_in_bytes has been written,
// and then to a counter of their own: without it a 64 MiB session queued 403 MiB in
// loopback TCP buffers. The session's socket buffers get the memory limit as their
// own ceiling. A cgroup charges the sockets its tasks create, so per-exec children
// turn the accounting on too ("-1": bounded by the session's counter above them).
// Kernels without the file (it is deprecated) are left as they are.
Result<void> set_tcp_memory(const std::string& memory_dir, uint64_t bytes) {
  std::string tcp = memory_dir + "/memory.kmem.tcp.limit_in_bytes";
  if (!exists(tcp)) return {};
  return write_file(tcp, bytes ? std::to_string(bytes) : "-1");
}

class CgroupV1 final : public Cgroup {
 public:
  CgroupV1(std::string name, V1Paths paths, UniqueFd unified_fd, IoLimits io = {})
      : name_(std::move(name)), paths_(std::move(paths)), unified_fd_(std::move(unified_fd)), io_(std::move(io)) {}
  ~CgroupV1() override {
    if (!destroyed_) destroy_or_warn(*this);
  }

  const std::string& name() const override { return name_; }
  Result<void> apply(const CgroupLimits& limits) override;
  Result<void> attach(pid_t pid) override;
  Result<std::vector<UniqueFd>> open_self_attach(bool include_cgroup2) const override;
  Result<CgroupStats> stats() const override;
  Result<bool> populated() const override;
  Result<void> signal_all(int sig) override { return signal_tree(paths_.memory, sig); }
  Result<void> kill_all() override;
  Result<void> request_freeze(bool frozen) override;
  Result<bool> freeze_settled(bool frozen) const override;
  Result<void> destroy() override;
  Result<std::unique_ptr<Cgroup>> create_child(const std::string& name) override;
  int cgroup2_fd() const override { return unified_fd_.get(); }
  const std::string& process_dir() const override { return paths_.memory; }
  // For an adopted stale cgroup whose destroy() failure the caller already reports.
  void forget() { destroyed_ = true; }

 private:
  Result<void> set_io(const IoLimits& io);
  Result<void> set_memory(uint64_t bytes);
  Result<uint64_t> cpu_usage_ns() const;
  Result<void> freeze_kill_thaw();
  Result<void> kill_until_empty();

  std::string name_;
  V1Paths paths_;
  UniqueFd unified_fd_;
  IoLimits io_;  // the host's, written by apply()
  bool destroyed_ = false;
};

Result<void> CgroupV1::apply(const CgroupLimits& limits) {
  auto quota = cpu_quota_us(limits.cpus);
  if (!quota) return std::unexpected(quota.error());
  std::string quota_us = *quota ? std::to_string(*quota) : "-1";
  std::string pids_max = limits.pids ? std::to_string(limits.pids) : "max";
  auto r = set_memory(limits.memory_bytes);
  if (r) r = set_tcp_memory(paths_.memory, limits.memory_bytes);
  if (r) r = write_file(paths_.memory + "/memory.swappiness", "0");
  if (r) r = write_file(paths_.cpu + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs));
  if (r) r = write_file(paths_.cpu + "/cpu.cfs_quota_us", quota_us);
  if (r) r = write_file(paths_.pids + "/pids.max", pids_max);
  if (r) r = set_io(io_);
  return r;
}

// blkio: the weight of whichever proportional policy the kernel has (CFQ's
// blkio.weight, 10..1000, or BFQ's blkio.bfq.weight, 1..1000), and blk-throttle's
// per-device limits. Skipped where the hierarchy or the file is missing.
Result<void> CgroupV1::set_io(const IoLimits& io) {
  if (io.empty() || paths_.blkio.empty()) return {};
  if (io.weight) {
    for (auto [file, low] : {std::pair{"/blkio.weight", 10u}, std::pair{"/blkio.bfq.weight", 1u}}) {
      std::string path = paths_.blkio + file;
      if (!exists(path)) continue;
      if (auto r = write_file(path, std::to_string(std::clamp(io.weight, low, 1000u))); !r) return r;
      break;
    }
  }
  for (const BlockDeviceLimit& d : io.devices) {
    std::string dev = std::to_string(d.major) + ":" + std::to_string(d.minor) + " ";
    for (auto [file, value] : {std::pair{"read_bps_device", d.read_bps}, std::pair{"write_bps_device", d.write_bps},
                               std::pair{"read_iops_device", d.read_iops}, std::pair{"write_iops_device", d.write_iops}}) {
      std::string path = paths_.blkio + "/blkio.throttle." + file;
      if (value == 0 || !exists(path)) continue;
      if (auto r = write_file(path, dev + std::to_string(value)); !r) return r;
    }
  }
  return {};
}

// Swap is off: memsw (memory + swap) gets the same limit as memory. Without swap
// accounting there is no memsw file and nothing to pair.
Result<void> CgroupV1::set_memory(uint64_t bytes) {
  std::string value = bytes ? std::to_string(bytes) : "-1";
  std::string limit = paths_.memory + "/memory.limit_in_bytes";
  std::string memsw = paths_.memory + "/memory.memsw.limit_in_bytes";
  if (!exists(memsw)) return write_file(limit, value);
  auto current = read_u64(limit);
  if (!current) return std::unexpected(current.error());
  // The kernel refuses any write that would leave memsw below memory: when raising,
  // memsw goes first; when lowering, memory goes first.
  bool raising = (bytes ? bytes : UINT64_MAX) >= *current;
  const std::string& first = raising ? memsw : limit;
  const std::string& second = raising ? limit : memsw;
  if (auto r = write_file(first, value); !r) return r;
  return write_file(second, value);
}

Result<void> CgroupV1::attach(pid_t pid) {
  for (const std::string& dir : paths_.all) {
    if (auto r = write_file(dir + "/cgroup.procs", std::to_string(pid)); !r) return r;
  }
  return {};
}

Result<std::vector<UniqueFd>> CgroupV1::open_self_attach(bool include_cgroup2) const {
  std::vector<UniqueFd> fds;
  for (const std::string& dir : paths_.all) {
    bool cgroup2 = dir == paths_.unified;
    if (cgroup2 && !include_cgroup2) continue;  // joined with CLONE_INTO_CGROUP
    std::string path = dir + (cgroup2 ? "/cgroup.procs" : "/tasks");
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return sys_fail("open " + path);
    fds.push_back(std::move(fd));
  }
  return fds;
}

Result<CgroupStats> CgroupV1::stats() const {
  CgroupStats stats;
  StatsReader reader;
  reader.set(stats.cpu_usage_ns, cpu_usage_ns());
  reader.set(stats.cpu_throttled_ns, read_key(paths_.cpu + "/cpu.stat", "throttled_time"));
  reader.set(stats.memory_current_bytes, read_control_u64(paths_.memory + "/memory.usage_in_bytes"));
  reader.set(stats.memory_peak_bytes, read_control_u64(paths_.memory + "/memory.max_usage_in_bytes"));
  reader.set(stats.oom_kills, read_key(paths_.memory + "/memory.oom_control", "oom_kill"));
  reader.set(stats.pids_current, read_control_u64(paths_.pids + "/pids.current"));
  reader.set(stats.pids_peak, read_u64_or_zero(paths_.pids + "/pids.peak"));
  reader.set(stats.pids_max_hits, read_key(paths_.pids + "/pids.events", "max"));
  return reader.finish(stats);
}

// cpuacct when mounted, else the cgroup2 node's core cpu.stat (hybrid), else nothing.
Result<uint64_t> CgroupV1::cpu_usage_ns() const {
  if (!paths_.cpuacct.empty()) return read_control_u64(paths_.cpuacct + "/cpuacct.usage");
  if (paths_.unified.empty()) return 0;
  auto usec = read_key(paths_.unified + "/cpu.stat", "usage_usec");
  if (!usec) return usec;
  return *usec * 1000;
}

Result<bool> CgroupV1::populated() const {
  if (!paths_.unified.empty() && exists(paths_.unified)) return cgroup2_populated(paths_.unified);
  // The memory hierarchy holds every task; a leftover may exist in other hierarchies only.
  for (const std::string& dir : paths_.all) {
    if (dir == paths_.unified || (dir != paths_.memory && exists(paths_.memory)) || !exists(dir)) continue;
    auto pids = read_pids(dir + "/cgroup.procs");
    if (!pids) return std::unexpected(pids.error());
    if (!pids->empty()) return true;
  }
  return false;
}

Result<void> CgroupV1::kill_all() {
  if (!paths_.unified.empty()) {
    auto killed = cgroup2_kill(paths_.unified);
    if (!killed) return std::unexpected(killed.error());
    if (*killed) return {};
  }
  if (!paths_.freezer.empty() && exists(paths_.freezer)) return freeze_kill_thaw();
  return kill_until_empty();
}

Result<void> CgroupV1::request_freeze(bool frozen) {
  if (!paths_.freezer.empty() && exists(paths_.freezer))
    return write_file(paths_.freezer + "/freezer.state", frozen ? "FROZEN" : "THAWED");
  // Hybrid host without a v1 freezer: the controller-less cgroup2 node has
  // cgroup.freeze in every non-root cgroup.
  if (!paths_.unified.empty()) return cgroup2_request_freeze(paths_.unified, frozen);
  return fail(ErrorCode::not_found, "cgroup " + name_ + ": no freezer on this host");
}

// freezer.state reads FREEZING until every task is frozen (and the children too).
Result<bool> CgroupV1::freeze_settled(bool frozen) const {
  if (!paths_.freezer.empty() && exists(paths_.freezer)) {
    auto text = read_file(paths_.freezer + "/freezer.state");
    if (!text) return std::unexpected(text.error());
    return text->starts_with(frozen ? "FROZEN" : "THAWED");
  }
  if (!paths_.unified.empty()) return cgroup2_frozen(paths_.unified, frozen);
  return fail(ErrorCode::not_found, "cgroup " + name_ + ": no freezer on this host");
}

// Frozen tasks cannot fork, so one pass over cgroup.procs reaches them all; but v1
// frozen tasks also ignore SIGKILL until thawed, so thaw after signalling. A freeze
// that does not settle in time still gets the signals.
Result<void> CgroupV1::freeze_kill_thaw() {
  std::string state = paths_.freezer + "/freezer.state";
  if (auto r = write_file(state, "FROZEN"); !r) return r;
  auto frozen = poll_until(
      [&]() -> Result<bool> {
        auto text = read_file(state);
        if (!text) return std::unexpected(text.error());
        return text->starts_with("FROZEN");
      },
      kFreezeTimeout);
  Result<void> killed = frozen ? kill_listed(paths_.freezer + "/cgroup.procs")
                               : Result<void>(std::unexpected(frozen.error()));
  auto thawed = write_file(state, "THAWED");
  return killed ? thawed : killed;
}

// No freezer: a task may fork while the list is read, so signal until none is left.
Result<void> CgroupV1::kill_until_empty() {
  std::string procs = paths_.memory + "/cgroup.procs";
  auto empty = poll_until(
      [&]() -> Result<bool> {
        auto pids = read_pids(procs);
        if (!pids) return std::unexpected(pids.error());
        for (pid_t pid : *pids) ::kill(pid, SIGKILL);
        return pids->empty();
      },
      kEmptyTimeout);
  if (!empty) return std::unexpected(empty.error());
  if (!*empty) return fail(ErrorCode::system, "tasks left after kill in " + procs, EBUSY);
  return {};
}

Result<void> CgroupV1::destroy() {
  if (destroyed_) return {};
  if (std::ranges::any_of(paths_.all, [](const std::string& dir) { return exists(dir); })) {
    // An empty cgroup needs no kill (the freezer round trip costs a few ms).
    auto busy = populated();
    if (!busy || *busy) {
      if (auto r = kill_all(); !r) return r;
      // A cgroup left frozen (a paused session; one whose daemon died while it was
      // paused): v1 frozen tasks take the SIGKILL only once thawed.
      if (!paths_.freezer.empty() && exists(paths_.freezer))
        if (auto r = write_file(paths_.freezer + "/freezer.state", "THAWED"); !r) return r;
      if (auto r = wait_until_empty(*this, paths_.memory); !r) return r;
    }
    for (const std::string& dir : paths_.all) {
      if (auto r = remove_cgroup_dir(dir); !r) return r;
    }
  }
  unified_fd_.reset();
  destroyed_ = true;
  return {};
}

Result<std::unique_ptr<Cgroup>> CgroupV1::create_child(const std::string& name) {
  if (auto r = check_name(name); !r) return std::unexpected(r.error());
  auto in = [&](const std::string& dir) { return dir.empty() ? std::string() : dir + "/" + name; };
  // No cgroup2 part: joining it would take the global lock (see open_self_attach).
  // No blkio part either: v1 throttles each cgroup on its own (hierarchical limits
  // exist only on cgroup2), so the execs stay in the sandbox's blkio cgroup and share
  // its limits. (Unless blkio shares a hierarchy with another controller.)
  bool own_blkio = !paths_.blkio.empty() &&
                   std::ranges::none_of(std::array{&paths_.memory, &paths_.cpu, &paths_.cpuacct, &paths_.pids,
                                                   &paths_.freezer},
                                        [&](const std::string* p) { return *p == paths_.blkio; });
  V1Paths child{in(paths_.memory), in(paths_.cpu), in(paths_.cpuacct), in(paths_.pids), in(paths_.freezer),
                own_blkio ? std::string() : in(paths_.blkio), std::string(), {}};
  CreatedDirs created;
  for (const std::string& dir : paths_.all) {
    if (dir == paths_.unified || (own_blkio && dir == paths_.blkio)) continue;
    child.all.push_back(dir + "/" + name);
    if (auto r = make_cgroup_dir(child.all.back()); !r) return std::unexpected(r.error());
    created.add(child.all.back());
  }
  if (auto r = set_tcp_memory(child.memory, 0); !r) return std::unexpected(r.error());
  created.commit();
  return std::make_unique<CgroupV1>(name_ + "/" + name, std::move(child), UniqueFd());
}

// memory.use_hierarchy must be 1 before cela/ has children, or its children's usage
// would not count against it. Modern kernels fix it at 1 and refuse the write: fine.
void enable_memory_hierarchy(const std::string& dir) {
  std::string path = dir + "/memory.use_hierarchy";
  auto value = read_u64(path);
  if (value && *value == 0) (void)write_file(path, "1");
}

class CgroupV1Host final : public CgroupHost {
 public:
  CgroupV1Host(CgroupMode mode, V1Layout layout, IoLimits io)
      : mode_(mode), layout_(std::move(layout)), io_(std::move(io)) {}

  CgroupMode mode() const override { return mode_; }
  IoSupport io_support() const override {
    if (layout_.blkio.empty()) return {};
    // BFQ's weight shows only in non-root cgroups (cela/, once it exists).
    std::string cela = layout_.blkio + "/cela";
    return {exists(layout_.blkio + "/blkio.weight") || exists(cela + "/blkio.weight") ||
                exists(cela + "/blkio.bfq.weight"),
            exists(layout_.blkio + "/blkio.throttle.read_bps_device")};
  }
  Result<std::unique_ptr<Cgroup>> create(const std::string& name) override;
  Result<void> remove_stale(const std::string& name) override;
  Result<std::vector<std::string>> list() const override;

 private:
  // Every hierarchy's `cela` directory, v1 ones then unified.
  // Every hierarchy's `cela` directory, v1 ones then unified; `leftovers` adds those
  // of hierarchies this host does not use but another cela may have.
  std::vector<std::string> parents(bool leftovers = false) const;
  V1Paths paths_for(const std::string& name, bool leftovers = false) const;

  CgroupMode mode_;
  V1Layout layout_;
  IoLimits io_;
  std::atomic<bool> tcp_key_held_{false};  // create() runs on several threads
};

std::vector<std::string> CgroupV1Host::parents(bool leftovers) const {
  std::vector<std::string> dirs;
  for (const std::string& hierarchy : layout_.hierarchies) dirs.push_back(hierarchy + "/cela");
  if (leftovers && !layout_.unused_blkio.empty()) dirs.push_back(layout_.unused_blkio + "/cela");
  if (!layout_.unified.empty()) dirs.push_back(layout_.unified + "/cela");
  return dirs;
}

V1Paths CgroupV1Host::paths_for(const std::string& name, bool leftovers) const {
  auto in = [&](const std::string& hierarchy) {
    return hierarchy.empty() ? std::string() : hierarchy + "/cela/" + name;
  };
  V1Paths paths;
  paths.memory = in(layout_.memory);
  paths.cpu = in(layout_.cpu);
  paths.cpuacct = in(layout_.cpuacct);
  paths.pids = in(layout_.pids);
  paths.freezer = in(layout_.freezer);
  paths.blkio = in(layout_.blkio);
  paths.unified = in(layout_.unified);
  for (const std::string& parent : parents(leftovers)) paths.all.push_back(parent + "/" + name);
  return paths;
}

Result<std::unique_ptr<Cgroup>> CgroupV1Host::create(const std::string& name) {
  if (auto r = check_name(name); !r) return std::unexpected(r.error());
  CreatedDirs created;
  for (const std::string& parent : parents()) {
    auto made = make_parent_dir(parent);
    if (!made) return std::unexpected(made.error());
    if (*made) created.add(parent);
  }
  enable_memory_hierarchy(layout_.memory + "/cela");
  // Socket accounting is behind a kernel static key, switched on with the first
  // accounting cgroup and off with the last: a key flip patches kernel text (~ms), and
  // sandboxes made and removed one after another would flip it every time. cela/
  // (no tasks of its own) keeps it on.
  if (!tcp_key_held_.exchange(true)) (void)set_tcp_memory(layout_.memory + "/cela", 0);
  V1Paths paths = paths_for(name);
  for (const std::string& dir : paths.all) {
    if (auto r = make_cgroup_dir(dir); !r) return std::unexpected(r.error());
    created.add(dir);
  }
  UniqueFd unified_fd;
  if (!paths.unified.empty()) {
    auto fd = open_dir(paths.unified);
    if (!fd) return std::unexpected(fd.error());
    unified_fd = std::move(*fd);
  }
  created.commit();
  return std::make_unique<CgroupV1>(name, std::move(paths), std::move(unified_fd), io_);
}

Result<void> CgroupV1Host::remove_stale(const std::string& name) {
  if (auto r = check_name(name); !r) return r;
  V1Paths paths = paths_for(name, true);
  if (std::ranges::none_of(paths.all, [](const std::string& dir) { return exists(dir); }))
    return {};
  CgroupV1 stale(name, std::move(paths), UniqueFd());
  auto r = stale.destroy();
  if (!r) stale.forget();
  return r;
}

Result<std::vector<std::string>> CgroupV1Host::list() const {
  std::vector<std::string> names;
  for (const std::string& parent : parents(true)) {
    auto children = list_children(parent);
    if (!children) return std::unexpected(children.error());
    names.insert(names.end(), children->begin(), children->end());
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// The hierarchy `controller` is mounted at under `root`, through symlinks; empty for a
// missing optional one.
Result<std::string> find_hierarchy(const std::string& root, std::string_view controller,
                                   bool required) {
  std::string path = root + "/" + std::string(controller);
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved)) return std::string(resolved);
  if (errno == ENOENT && !required) return std::string();
  if (errno == ENOENT)
    return fail(ErrorCode::not_found, "cgroup v1 controller not mounted: " + path, ENOENT);
  return sys_fail("realpath " + path);
}

Result<V1Layout> find_layout(CgroupMode mode, const std::string& root, const CgroupHostOptions& options) {
  V1Layout layout;
  struct Wanted {
    std::string_view controller;
    std::string* hierarchy;
    bool required;
  };
  for (auto [controller, hierarchy, required] :
       {Wanted{"memory", &layout.memory, true}, Wanted{"cpu", &layout.cpu, true},
        Wanted{"cpuacct", &layout.cpuacct, false}, Wanted{"pids", &layout.pids, true},
        Wanted{"freezer", &layout.freezer, false}, Wanted{"blkio", &layout.blkio, false}}) {
    auto found = find_hierarchy(root, controller, required);
    if (!found) return std::unexpected(found.error());
    if (hierarchy == &layout.blkio && options.io.empty()) {
      if (std::ranges::find(layout.hierarchies, *found) == layout.hierarchies.end()) layout.unused_blkio = *found;
      continue;
    }
    *hierarchy = *found;
    if (!found->empty() &&
        std::ranges::find(layout.hierarchies, *found) == layout.hierarchies.end())
      layout.hierarchies.push_back(*found);
  }
  if (mode == CgroupMode::hybrid) {
    layout.unified = root + "/unified";
    if (!exists(layout.unified + "/cgroup.procs"))
      return fail(ErrorCode::not_found, "no cgroup2 at " + layout.unified);
  }
  return layout;
}

}  // namespace

Result<std::unique_ptr<CgroupHost>> open_cgroup_v1_host(CgroupMode mode, const std::string& root,
                                                        const CgroupHostOptions& options) {
  auto layout = find_layout(mode, root, options);
  if (!layout) return std::unexpected(layout.error());
  // BFQ's weight file shows only in non-root cgroups: cela/ is made here, so that
  // io_support() sees it on a host where no sandbox has run yet (create() makes the
  // same directory; a failure shows there).
  if (!layout->blkio.empty()) (void)make_parent_dir(layout->blkio + "/cela");
  return std::make_unique<CgroupV1Host>(mode, std::move(*layout), options.io);
}

}  // namespace cela::jail
