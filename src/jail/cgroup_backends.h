// Private to the cgroup code: the two host backends (cgroup_v1.cc for legacy and
// hybrid hosts, cgroup_v2.cc for unified ones) and the cgroupfs file helpers they
// share (defined in cgroup.cc). Nothing outside src/jail/cgroup*.cc includes this.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "jail/cgroup.h"

namespace cela::jail {

Result<std::unique_ptr<CgroupHost>> open_cgroup_v1_host(CgroupMode mode, const std::string& root,
                                                        const CgroupHostOptions& options);
Result<std::unique_ptr<CgroupHost>> open_cgroup_v2_host(const std::string& root, const CgroupHostOptions& options);

namespace cgroupfs {

using std::chrono::milliseconds;

constexpr uint64_t kCpuPeriodUs = 100000;
constexpr milliseconds kEmptyTimeout{2000};   // kill_all → no task left
constexpr milliseconds kRmdirTimeout{1000};   // rmdir retried while EBUSY

// The CFS quota for `cpus` in µs per kCpuPeriodUs (at least 1000), 0 for unlimited.
Result<uint64_t> cpu_quota_us(double cpus);
// A cgroup name is one path component: not empty, no '/', not "." or "..".
Result<void> check_name(const std::string& name);

bool exists(const std::string& path);
// A control file's text. Statistics are read on the exec path: one read() returns a
// small seq_file whole (the kernel fills the buffer), so no second read finds its end.
Result<std::string> read_control(const std::string& path);
Result<uint64_t> read_control_u64(const std::string& path);
// The value of `key` in a flat-keyed file ("key value" lines: cpu.stat,
// memory.events, pids.events, cgroup.events, memory.oom_control).
Result<uint64_t> read_key(const std::string& path, std::string_view key);
// read_u64, or 0 when the file does not exist (an interface newer than the kernel).
Result<uint64_t> read_u64_or_zero(const std::string& path);
Result<std::vector<pid_t>> read_pids(const std::string& procs_path);
// kill(pid, sig) for every pid in `dir`'s cgroup.procs and in its child cgroups'.
Result<void> signal_tree(const std::string& dir, int sig);
// SIGKILLs every pid listed in `procs_path`; a pid that already exited is fine.
Result<void> kill_listed(const std::string& procs_path);

// Calls `done` every millisecond until it returns true (→ true) or `limit` passes
// (→ false); an error from `done` ends the wait.
Result<bool> poll_until(const std::function<Result<bool>()>& done, milliseconds limit);
// Waits until cg.populated() is false. A node that vanished (ENOENT) counts as empty:
// the rmdir that follows reports the real state.
Result<void> wait_until_empty(const Cgroup& cg, const std::string& where);

// mkdir for a parent (`cela`): true when created now, false when it already existed.
Result<bool> make_parent_dir(const std::string& path);
// mkdir for a sandbox's cgroup: an existing one is an error (EEXIST).
Result<void> make_cgroup_dir(const std::string& path);
// rmdir, retried while EBUSY; a missing directory is fine.
Result<void> remove_cgroup_dir(const std::string& path);
Result<UniqueFd> open_dir(const std::string& path);
// Names of the subdirectories of `dir` (sorted); a missing `dir` has none.
Result<std::vector<std::string>> list_children(const std::string& dir);

// cgroup2 core files, present in every cgroup2 node even without controllers.
Result<bool> cgroup2_populated(const std::string& dir);
// Writes "1" to cgroup.kill: false when the kernel has none (before 5.14).
Result<bool> cgroup2_kill(const std::string& dir);
// Writes cgroup.freeze; cgroup2_frozen: whether cgroup.events reports `frozen` so.
Result<void> cgroup2_request_freeze(const std::string& dir, bool frozen);
Result<bool> cgroup2_frozen(const std::string& dir, bool frozen);

// Directories made during a create(); removed again (best effort) unless committed.
class CreatedDirs {
 public:
  CreatedDirs() = default;
  CreatedDirs(const CreatedDirs&) = delete;
  CreatedDirs& operator=(const CreatedDirs&) = delete;
  ~CreatedDirs();
  void add(std::string path) { dirs_.push_back(std::move(path)); }
  void commit() { dirs_.clear(); }

 private:
  std::vector<std::string> dirs_;
};

// For a Cgroup destructor: destroy() must not throw, so a failure is logged.
void destroy_or_warn(Cgroup& cg);

// Collects CgroupStats fields, keeping the first read error.
class StatsReader {
 public:
  void set(uint64_t& field, Result<uint64_t> value, uint64_t scale = 1);
  Result<CgroupStats> finish(const CgroupStats& stats) const;

 private:
  Result<void> status_;
};

}  // namespace cgroupfs
}  // namespace cela::jail
