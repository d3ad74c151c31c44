// Host mode detection, the one place that picks a backend for a mode, and the
// cgroupfs file helpers both backends share.
#include "jail/cgroup.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <sstream>
#include <thread>

#include "common/fs.h"
#include <signal.h>

#include "jail/cgroup_backends.h"

namespace cela::jail {

std::string_view to_string(CgroupMode mode) {
  switch (mode) {
    case CgroupMode::legacy:
      return "legacy";
    case CgroupMode::hybrid:
      return "hybrid";
    case CgroupMode::unified:
      return "unified";
  }
  return "unknown";
}

namespace {

Result<bool> is_cgroup2(const std::string& path) {
  struct statfs fs = {};
  if (::statfs(path.c_str(), &fs) != 0) return sys_fail("statfs " + path);
  return fs.f_type == CGROUP2_SUPER_MAGIC;
}

}  // namespace

Result<CgroupMode> detect_cgroup_mode(const std::string& root) {
  auto root_v2 = is_cgroup2(root);
  if (!root_v2) return std::unexpected(root_v2.error());
  if (*root_v2) return CgroupMode::unified;
  auto unified_v2 = is_cgroup2(root + "/unified");
  if (unified_v2 && *unified_v2) return CgroupMode::hybrid;
  return CgroupMode::legacy;
}

Result<std::unique_ptr<CgroupHost>> open_cgroup_host(CgroupMode mode, const std::string& root,
                                                     const CgroupHostOptions& options) {
  if (mode == CgroupMode::unified) return open_cgroup_v2_host(root, options);
  return open_cgroup_v1_host(mode, root, options);
}

Result<std::optional<std::pair<uint32_t, uint32_t>>> whole_disk_of(const std::string& path, const std::string& sys) {
  struct stat st = {};
  if (::stat(path.c_str(), &st) != 0) return sys_fail("stat " + path);
  std::string node = sys + "/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  if (!cgroupfs::exists(node)) return std::nullopt;  // not a block device
  // A partition's directory sits inside its disk's: the disk's `dev` names it.
  std::string dev_file = cgroupfs::exists(node + "/partition") ? node + "/../dev" : node + "/dev";
  auto dev = read_file(dev_file);
  if (!dev) return std::unexpected(dev.error());
  unsigned maj = 0, min = 0;
  if (std::sscanf(dev->c_str(), "%u:%u", &maj, &min) != 2)
    return fail(ErrorCode::internal, "unexpected contents of " + dev_file);
  return std::pair<uint32_t, uint32_t>{maj, min};
}

Result<void> Cgroup::freeze(bool frozen) {
  if (auto r = request_freeze(frozen); !r) return r;
  auto settled = cgroupfs::poll_until([&] { return freeze_settled(frozen); }, kFreezeTimeout);
  if (!settled) return std::unexpected(settled.error());
  if (!*settled) return fail(ErrorCode::system, "cgroup " + name() + ": freezer did not settle");
  return {};
}

namespace cgroupfs {

Result<uint64_t> cpu_quota_us(double cpus) {
  if (!std::isfinite(cpus) || cpus < 0)
    return fail(ErrorCode::invalid_argument, "cpu limit must be >= 0: " + std::to_string(cpus));
  if (cpus == 0) return 0;
  return std::max<uint64_t>(1000, std::llround(cpus * kCpuPeriodUs));
}

Result<void> check_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return fail(ErrorCode::invalid_argument, "bad cgroup name '" + name + "'");
  return {};
}

bool exists(const std::string& path) {
  struct stat st = {};
  return ::stat(path.c_str(), &st) == 0;
}

Result<uint64_t> read_key(const std::string& path, std::string_view key) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  std::istringstream lines(*text);
  std::string line;
  while (std::getline(lines, line)) {
    std::string_view view = line;
    if (!view.starts_with(key) || view.size() <= key.size() || view[key.size()] != ' ') continue;
    view.remove_prefix(key.size() + 1);
    uint64_t value = 0;
    auto [ptr, ec] = std::from_chars(view.data(), view.data() + view.size(), value);
    if (ec != std::errc())
      return fail(ErrorCode::internal, "bad value of '" + std::string(key) + "' in " + path);
    return value;
  }
  return fail(ErrorCode::internal, "no '" + std::string(key) + "' in " + path);
}

Result<uint64_t> read_u64_or_zero(const std::string& path) {
  if (!exists(path)) return 0;
  return read_u64(path);
}

Result<std::vector<pid_t>> read_pids(const std::string& procs_path) {
  auto text = read_file(procs_path);
  if (!text) return std::unexpected(text.error());
  std::vector<pid_t> pids;
  std::istringstream in(*text);
  for (pid_t pid = 0; in >> pid;) pids.push_back(pid);
  return pids;
}

Result<void> kill_listed(const std::string& procs_path) {
  auto pids = read_pids(procs_path);
  if (!pids) return std::unexpected(pids.error());
  for (pid_t pid : *pids) {
    if (::kill(pid, SIGKILL) != 0 && errno != ESRCH)
      return sys_fail("kill " + std::to_string(pid) + " listed in " + procs_path);
  }
  return {};
}

Result<bool> poll_until(const std::function<Result<bool>()>& done, milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto ok = done();
    if (!ok || *ok) return ok;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
}

Result<void> wait_until_empty(const Cgroup& cg, const std::string& where) {
  auto empty = poll_until(
      [&]() -> Result<bool> {
        auto populated = cg.populated();
        if (!populated && populated.error().err == ENOENT) return true;
        if (!populated) return std::unexpected(populated.error());
        return !*populated;
      },
      kEmptyTimeout);
  if (!empty) return std::unexpected(empty.error());
  if (!*empty) return fail(ErrorCode::system, "tasks left after kill in " + where, EBUSY);
  return {};
}

Result<bool> make_parent_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return true;
  if (errno == EEXIST) return false;
  return sys_fail("mkdir " + path);
}

Result<void> make_cgroup_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) return {};
  if (errno == EEXIST)
    return fail(ErrorCode::invalid_argument, "cgroup already exists: " + path, EEXIST);
  return sys_fail("mkdir " + path);
}

Result<void> remove_cgroup_dir(const std::string& path) {
  // Children first (per-exec cgroups a crashed owner left): rmdir of a cgroup with
  // child cgroups fails with EBUSY.
  if (auto children = list_children(path); children) {
    for (const std::string& child : *children)
      if (auto r = remove_cgroup_dir(path + "/" + child); !r) return r;
  }
  // A v1 cgroup stays busy for a moment after its last task exits, until the kernel
  // has released the task's css references.
  auto removed = poll_until(
      [&]() -> Result<bool> {
        if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return true;
        if (errno == EBUSY) return false;
        return sys_fail("rmdir " + path);
      },
      kRmdirTimeout);
  if (!removed) return std::unexpected(removed.error());
  if (!*removed) return sys_fail("rmdir " + path, EBUSY);
  return {};
}

Result<void> signal_tree(const std::string& dir, int sig) {
  auto pids = read_pids(dir + "/cgroup.procs");
  if (!pids) return std::unexpected(pids.error());
  for (pid_t pid : *pids) ::kill(pid, sig);  // ESRCH: it just exited
  auto children = list_children(dir);
  if (!children) return std::unexpected(children.error());
  for (const std::string& child : *children)
    if (auto r = signal_tree(dir + "/" + child, sig); !r) return r;
  return {};
}

Result<UniqueFd> open_dir(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return sys_fail("open " + path);
  return fd;
}

Result<std::vector<std::string>> list_children(const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> stream(::opendir(dir.c_str()), ::closedir);
  if (!stream) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return sys_fail("opendir " + dir);
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(stream.get())) {
    std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    // cgroupfs fills in d_type: one stat per child only where a filesystem does not.
    if (entry->d_type == DT_DIR) {
      names.push_back(std::move(name));
      continue;
    }
    if (entry->d_type != DT_UNKNOWN) continue;
    struct stat st = {};
    if (::stat((dir + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<bool> cgroup2_populated(const std::string& dir) {
  auto populated = read_key(dir + "/cgroup.events", "populated");
  if (!populated) return std::unexpected(populated.error());
  return *populated != 0;
}

Result<bool> cgroup2_kill(const std::string& dir) {
  std::string kill_file = dir + "/cgroup.kill";
  if (!exists(kill_file)) return false;
  if (auto r = write_file(kill_file, "1"); !r) return std::unexpected(r.error());
  return true;
}

Result<void> cgroup2_request_freeze(const std::string& dir, bool frozen) {
  return write_file(dir + "/cgroup.freeze", frozen ? "1" : "0");
}

Result<bool> cgroup2_frozen(const std::string& dir, bool frozen) {
  auto state = read_key(dir + "/cgroup.events", "frozen");
  if (!state) return std::unexpected(state.error());
  return *state == (frozen ? 1 : 0);
}

CreatedDirs::~CreatedDirs() {
  for (auto it = dirs_.rbegin(); it != dirs_.rend(); ++it) ::rmdir(it->c_str());
}

void destroy_or_warn(Cgroup& cg) {
  if (auto r = cg.destroy(); !r)
    std::fprintf(stderr, "cela: cgroup %s left behind: %s\n", cg.name().c_str(),
                 r.error().message().c_str());
}

void StatsReader::set(uint64_t& field, Result<uint64_t> value, uint64_t scale) {
  if (!status_) return;
  if (!value) {
    status_ = std::unexpected(value.error());
    return;
  }
  field = *value * scale;
}

Result<CgroupStats> StatsReader::finish(const CgroupStats& stats) const {
  if (!status_) return std::unexpected(status_.error());
  return stats;
}

}  // namespace cgroupfs

namespace {
Result<void> collect_members(const std::string& dir, const std::string& child, std::vector<CgroupMember>& out) {
  auto pids = cgroupfs::read_pids(dir + "/cgroup.procs");
  if (!pids) {
    // Removed while it was read (its exec ended): nothing left in it.
    if (pids.error().err == ENOENT || pids.error().err == ENODEV) return {};
    return std::unexpected(pids.error());
  }
  for (pid_t pid : *pids) out.push_back({pid, child});
  auto children = cgroupfs::list_children(dir);
  if (!children) return std::unexpected(children.error());
  for (const std::string& name : *children)
    if (auto r = collect_members(dir + "/" + name, child.empty() ? name : child + "/" + name, out); !r) return r;
  return {};
}
}  // namespace

Result<std::vector<CgroupMember>> list_members(const std::string& dir) {
  std::vector<CgroupMember> out;
  if (!cgroupfs::exists(dir)) return out;
  if (auto r = collect_members(dir, "", out); !r) return std::unexpected(r.error());
  return out;
}

}  // namespace cela::jail
