// Cgroup v2 backend (unified hosts): one node <root>/cela/<name> holds the limits,
// the accounting and kill-all. cela/ gets memory, cpu and pids delegated from the root.
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

class CgroupV2 final : public Cgroup {
 public:
  CgroupV2(std::string name, std::string dir, UniqueFd fd)
      : name_(std::move(name)), dir_(std::move(dir)), fd_(std::move(fd)) {}
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
  Result<void> freeze(bool frozen) override;
  Result<void> destroy() override;
  int cgroup2_fd() const override { return fd_.get(); }
  // For an adopted stale cgroup whose destroy() failure the caller already reports.
  void forget() { destroyed_ = true; }

 private:
  std::string file(std::string_view name) const { return dir_ + "/" + std::string(name); }
  Result<void> freeze_kill_thaw();

  std::string name_;
  std::string dir_;
  UniqueFd fd_;
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
  return r;
}

Result<CgroupStats> CgroupV2::stats() const {
  CgroupStats stats;
  StatsReader reader;
  reader.set(stats.cpu_usage_ns, read_key(file("cpu.stat"), "usage_usec"), 1000);
  reader.set(stats.cpu_throttled_ns, read_key(file("cpu.stat"), "throttled_usec"), 1000);
  reader.set(stats.memory_current_bytes, read_u64(file("memory.current")));
  reader.set(stats.memory_peak_bytes, read_u64_or_zero(file("memory.peak")));
  reader.set(stats.oom_kills, read_key(file("memory.events"), "oom_kill"));
  reader.set(stats.pids_current, read_u64(file("pids.current")));
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

Result<void> CgroupV2::freeze(bool frozen) { return cgroup2_freeze(dir_, frozen); }

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

// Adds the controllers cela needs to dir/cgroup.subtree_control, writing only those
// not yet enabled (a child can only have what its parent enables for it).
Result<void> enable_controllers(const std::string& dir) {
  std::string path = dir + "/cgroup.subtree_control";
  auto enabled = read_file(path);
  if (!enabled) return std::unexpected(enabled.error());
  std::istringstream words(*enabled);
  std::vector<std::string> have{std::istream_iterator<std::string>(words), {}};
  std::string request;
  for (std::string_view controller : kControllers) {
    if (std::find(have.begin(), have.end(), controller) != have.end()) continue;
    if (!request.empty()) request += ' ';
    request += "+" + std::string(controller);
  }
  if (request.empty()) return {};
  return write_file(path, request);
}

class CgroupV2Host final : public CgroupHost {
 public:
  explicit CgroupV2Host(std::string root) : root_(std::move(root)), parent_(root_ + "/cela") {}

  CgroupMode mode() const override { return CgroupMode::unified; }
  Result<std::unique_ptr<Cgroup>> create(const std::string& name) override;
  Result<void> remove_stale(const std::string& name) override;
  Result<std::vector<std::string>> list() const override { return list_children(parent_); }

 private:
  std::string root_;
  std::string parent_;
};

Result<std::unique_ptr<Cgroup>> CgroupV2Host::create(const std::string& name) {
  if (auto r = check_name(name); !r) return std::unexpected(r.error());
  CreatedDirs created;
  if (auto r = enable_controllers(root_); !r) return std::unexpected(r.error());
  auto made_parent = make_parent_dir(parent_);
  if (!made_parent) return std::unexpected(made_parent.error());
  if (*made_parent) created.add(parent_);
  if (auto r = enable_controllers(parent_); !r) return std::unexpected(r.error());
  std::string dir = parent_ + "/" + name;
  if (auto r = make_cgroup_dir(dir); !r) return std::unexpected(r.error());
  created.add(dir);
  auto fd = open_dir(dir);
  if (!fd) return std::unexpected(fd.error());
  created.commit();
  return std::make_unique<CgroupV2>(name, dir, std::move(*fd));
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

Result<std::unique_ptr<CgroupHost>> open_cgroup_v2_host(const std::string& root) {
  if (!cgroupfs::exists(root + "/cgroup.controllers"))
    return fail(ErrorCode::not_found, "no cgroup2 at " + root);
  return std::make_unique<CgroupV2Host>(root);
}

}  // namespace cela::jail
