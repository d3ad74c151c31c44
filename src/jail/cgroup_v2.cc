// Cgroup v2 backend (unified hosts): one node <root>/cela/<name> holds the limits,
// the accounting and kill-all. cela/ gets memory, cpu and pids delegated from the root
// (and io, when block I/O limits are wanted and the root has it).
#include <algorithm>
#include <array>
#include <iterator>
#include <sstream>

#include "common/fs.h"
#include <fcntl.h>

#include "jail/cgroup_backends.h"

namespace cela::jail {
namespace {

using namespace cgroupfs;

constexpr std::array<std::string_view, 3> kControllers = {"memory", "cpu", "pids"};

// The words of a space-separated cgroup file (cgroup.controllers, subtree_control).
Result<std::vector<std::string>> read_words(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  std::istringstream words(*text);
  return std::vector<std::string>{std::istream_iterator<std::string>(words), {}};
}

class CgroupV2 final : public Cgroup {
 public:
  CgroupV2(std::string name, std::string dir, UniqueFd fd, IoLimits io = {})
      : name_(std::move(name)), dir_(std::move(dir)), fd_(std::move(fd)), io_(std::move(io)) {}
  ~CgroupV2() override {
    if (!destroyed_) destroy_or_warn(*this);
  }

  const std::string& name() const override { return name_; }
  Result<void> apply(const CgroupLimits& limits) override;
  Result<void> attach(pid_t pid) override {
    return write_file(file("cgroup.procs"), std::to_string(pid));
  }
  Result<std::vector<UniqueFd>> open_self_attach(bool include_cgroup2) const override {
    std::vector<UniqueFd> fds;
    if (!include_cgroup2) return fds;
    UniqueFd fd(::open(file("cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return sys_fail("open " + file("cgroup.procs"));
    fds.push_back(std::move(fd));
    return fds;
  }
  Result<std::unique_ptr<Cgroup>> create_child(const std::string& name) override {
    if (auto r = check_name(name); !r) return std::unexpected(r.error());
    std::string dir = dir_ + "/" + name;
    if (auto r = make_cgroup_dir(dir); !r) return std::unexpected(r.error());
    auto fd = open_dir(dir);
    if (!fd) {
      ::rmdir(dir.c_str());
      return std::unexpected(fd.error());
    }
    return std::make_unique<CgroupV2>(name_ + "/" + name, dir, std::move(*fd));
  }
  Result<CgroupStats> stats() const override;
  Result<bool> populated() const override { return cgroup2_populated(dir_); }
  Result<void> signal_all(int sig) override { return signal_tree(dir_, sig); }
  Result<void> kill_all() override;
  Result<void> request_freeze(bool frozen) override { return cgroup2_request_freeze(dir_, frozen); }
  Result<bool> freeze_settled(bool frozen) const override { return cgroup2_frozen(dir_, frozen); }
  Result<void> destroy() override;
  int cgroup2_fd() const override { return fd_.get(); }
  const std::string& process_dir() const override { return dir_; }
  // For an adopted stale cgroup whose destroy() failure the caller already reports.
  void forget() { destroyed_ = true; }

 private:
  Result<void> set_io(const IoLimits& io);
  std::string file(std::string_view name) const { return dir_ + "/" + std::string(name); }
  Result<void> freeze_kill_thaw();

  std::string name_;
  std::string dir_;
  UniqueFd fd_;
  IoLimits io_;  // the host's, written by apply()
  bool destroyed_ = false;
};

Result<void> CgroupV2::apply(const CgroupLimits& limits) {
  auto quota = cpu_quota_us(limits.cpus);
  if (!quota) return std::unexpected(quota.error());
  bool memory_set = limits.memory_bytes != 0;
  auto r = write_file(file("memory.max"), memory_set ? std::to_string(limits.memory_bytes) : "max");
  if (r && exists(file("memory.swap.max")))
    r = write_file(file("memory.swap.max"), memory_set ? "0" : "max");
  if (r) {
    std::string cpu_max = *quota ? std::to_string(*quota) : "max";
    r = write_file(file("cpu.max"), cpu_max + " " + std::to_string(kCpuPeriodUs));
  }
  if (r) r = write_file(file("pids.max"), limits.pids ? std::to_string(limits.pids) : "max");
  if (r) r = set_io(io_);
  return r;
}

// io.weight ("default N", 1..10000) exists where a weight-based policy is active (the
// iocost controller or BFQ's io.bfq.weight); io.max holds the per-device throttles.
// A file the kernel did not create is skipped.
Result<void> CgroupV2::set_io(const IoLimits& io) {
  if (io.weight) {
    std::string weight = std::to_string(std::clamp(io.weight, 1u, 10000u));
    if (exists(file("io.weight"))) {
      if (auto r = write_file(file("io.weight"), "default " + weight); !r) return r;
    } else if (exists(file("io.bfq.weight"))) {
      if (auto r = write_file(file("io.bfq.weight"), std::to_string(std::min(io.weight, 1000u))); !r) return r;
    }
  }
  if (io.devices.empty() || !exists(file("io.max"))) return {};
  for (const BlockDeviceLimit& d : io.devices) {
    std::string line = std::to_string(d.major) + ":" + std::to_string(d.minor);
    for (auto [key, value] : {std::pair{"rbps", d.read_bps}, std::pair{"wbps", d.write_bps},
                              std::pair{"riops", d.read_iops}, std::pair{"wiops", d.write_iops}})
      line += std::string(" ") + key + "=" + (value ? std::to_string(value) : "max");
    if (auto r = write_file(file("io.max"), line); !r) return r;
  }
  return {};
}

Result<CgroupStats> CgroupV2::stats() const {
  CgroupStats stats;
  StatsReader reader;
  reader.set(stats.cpu_usage_ns, read_key(file("cpu.stat"), "usage_usec"), 1000);
  reader.set(stats.cpu_throttled_ns, read_key(file("cpu.stat"), "throttled_usec"), 1000);
  reader.set(stats.memory_current_bytes, read_control_u64(file("memory.current")));
  reader.set(stats.memory_peak_bytes, read_u64_or_zero(file("memory.peak")));
  reader.set(stats.oom_kills, read_key(file("memory.events"), "oom_kill"));
  reader.set(stats.pids_current, read_control_u64(file("pids.current")));
  reader.set(stats.pids_peak, read_u64_or_zero(file("pids.peak")));
  reader.set(stats.pids_max_hits, read_key(file("pids.events"), "max"));
  return reader.finish(stats);
}

Result<void> CgroupV2::kill_all() {
  auto killed = cgroup2_kill(dir_);
  if (!killed) return std::unexpected(killed.error());
  if (*killed) return {};
  return freeze_kill_thaw();
}


// Without cgroup.kill: freeze first so no task forks between listing cgroup.procs and
// signalling it (a freeze that does not settle in time still gets the signals), then
// thaw so the group is not left frozen.
Result<void> CgroupV2::freeze_kill_thaw() {
  if (auto r = write_file(file("cgroup.freeze"), "1"); !r) return r;
  auto frozen = poll_until(
      [&]() -> Result<bool> {
        auto state = read_key(file("cgroup.events"), "frozen");
        if (!state) return std::unexpected(state.error());
        return *state == 1;
      },
      kFreezeTimeout);
  Result<void> killed =
      frozen ? kill_listed(file("cgroup.procs")) : Result<void>(std::unexpected(frozen.error()));
  auto thawed = write_file(file("cgroup.freeze"), "0");
  return killed ? thawed : killed;
}

Result<void> CgroupV2::destroy() {
  if (destroyed_) return {};
  if (exists(dir_)) {
    auto busy = populated();
    if (!busy || *busy) {
      if (auto r = kill_all(); !r) return r;
      if (auto r = wait_until_empty(*this, dir_); !r) return r;
    }
    if (auto r = remove_cgroup_dir(dir_); !r) return r;
  }
  fd_.reset();
  destroyed_ = true;
  return {};
}

// Adds `controllers` to dir/cgroup.subtree_control, writing only those not yet
// enabled (a child can only have what its parent enables for it).
Result<void> enable_controllers(const std::string& dir, const std::vector<std::string_view>& controllers) {
  std::string path = dir + "/cgroup.subtree_control";
  auto have = read_words(path);
  if (!have) return std::unexpected(have.error());
  std::string request;
  for (std::string_view controller : controllers) {
    if (std::find(have->begin(), have->end(), controller) != have->end()) continue;
    if (!request.empty()) request += ' ';
    request += "+" + std::string(controller);
  }
  if (request.empty()) return {};
  return write_file(path, request);
}

class CgroupV2Host final : public CgroupHost {
 public:
  CgroupV2Host(std::string root, std::vector<std::string_view> controllers, IoLimits io)
      : root_(std::move(root)), parent_(root_ + "/cela"), controllers_(std::move(controllers)), io_(std::move(io)) {}

  CgroupMode mode() const override { return CgroupMode::unified; }
  IoSupport io_support() const override {
    bool io = std::ranges::find(controllers_, "io") != controllers_.end();
    // Whether io.weight exists (iocost or BFQ) shows only in a child: say yes, apply
    // skips it where missing.
    return {io, io};
  }
  Result<std::unique_ptr<Cgroup>> create(const std::string& name) override;
  Result<void> remove_stale(const std::string& name) override;
  Result<std::vector<std::string>> list() const override { return list_children(parent_); }

 private:
  std::string root_;
  std::string parent_;
  std::vector<std::string_view> controllers_;  // delegated to cela/ and its children
  IoLimits io_;
};

Result<std::unique_ptr<Cgroup>> CgroupV2Host::create(const std::string& name) {
  if (auto r = check_name(name); !r) return std::unexpected(r.error());
  CreatedDirs created;
  if (auto r = enable_controllers(root_, controllers_); !r) return std::unexpected(r.error());
  auto made_parent = make_parent_dir(parent_);
  if (!made_parent) return std::unexpected(made_parent.error());
  if (*made_parent) created.add(parent_);
  if (auto r = enable_controllers(parent_, controllers_); !r) return std::unexpected(r.error());
  std::string dir = parent_ + "/" + name;
  if (auto r = make_cgroup_dir(dir); !r) return std::unexpected(r.error());
  created.add(dir);
  auto fd = open_dir(dir);
  if (!fd) return std::unexpected(fd.error());
  created.commit();
  return std::make_unique<CgroupV2>(name, dir, std::move(*fd), io_);
}

Result<void> CgroupV2Host::remove_stale(const std::string& name) {
  if (auto r = check_name(name); !r) return r;
  std::string dir = parent_ + "/" + name;
  if (!exists(dir)) return {};
  CgroupV2 stale(name, dir, UniqueFd());
  auto r = stale.destroy();
  if (!r) stale.forget();
  return r;
}

}  // namespace

Result<std::unique_ptr<CgroupHost>> open_cgroup_v2_host(const std::string& root, const CgroupHostOptions& options) {
  if (!cgroupfs::exists(root + "/cgroup.controllers"))
    return fail(ErrorCode::not_found, "no cgroup2 at " + root);
  std::vector<std::string_view> controllers(kControllers.begin(), kControllers.end());
  if (!options.io.empty()) {
    auto available = read_words(root + "/cgroup.controllers");
    if (!available) return std::unexpected(available.error());
    if (std::ranges::find(*available, "io") != available->end()) controllers.push_back("io");
  }
  return std::make_unique<CgroupV2Host>(root, std::move(controllers), options.io);
}

}  // namespace cela::jail
