#include "cli/run_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "common/fd.h"
#include "common/fs.h"

namespace cela::cli {
namespace {

constexpr std::string_view kRunPrefix = "run-";

// The start time of process `pid` (field 22 of /proc/PID/stat), which tells a live
// process from a later one that reuses its pid; nullopt when there is no such process.
std::optional<uint64_t> process_start_time(pid_t pid) {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  const std::string& text = *stat;
  auto close = text.rfind(')');  // comm may hold spaces and parentheses
  if (close == std::string::npos) return std::nullopt;
  std::string_view rest(text.c_str() + close + 1);
  for (int field = 3; field < 22; ++field) {
    auto sp = rest.find(' ', 1);
    if (sp == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(sp);
  }
  rest.remove_prefix(1);
  uint64_t start = 0;
  auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), start);
  if (ec != std::errc()) return std::nullopt;
  return start;
}

}  // namespace

std::string own_run_name() {
  pid_t self = ::getpid();
  return std::string(kRunPrefix) + std::to_string(self) + "-" + std::to_string(process_start_time(self).value_or(0));
}

bool runner_alive(std::string_view name) {
  if (!name.starts_with(kRunPrefix)) return true;
  name.remove_prefix(kRunPrefix.size());
  auto dash = name.find('-');
  if (dash == std::string_view::npos) return true;
  pid_t pid = 0;
  uint64_t start = 0;
  auto p1 = std::from_chars(name.data(), name.data() + dash, pid);
  auto p2 = std::from_chars(name.data() + dash + 1, name.data() + name.size(), start);
  if (p1.ec != std::errc() || p2.ec != std::errc() || p2.ptr != name.data() + name.size()) return true;  // not ours
  return process_start_time(pid) == start;
}

RunRecord::RunRecord(std::string name, std::string dir) : path_(dir + "/" + name) {
  // Best effort: without a record only this run's leftovers would outlive a crash.
  if (auto r = make_dirs(dir, 0700); !r) {
    std::fprintf(stderr, "cela: run record: %s\n", r.error().message().c_str());
    return;
  }
  UniqueFd fd(::open(path_.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  if (!fd) std::fprintf(stderr, "cela: run record %s: %s\n", path_.c_str(), std::strerror(errno));
}

RunRecord::~RunRecord() {
  if (!keep_) ::unlink(path_.c_str());
}

void reclaim_stale_runs(runtime::Backend& backend, const std::string& own, const std::string& dir) {
  std::unique_ptr<DIR, int (*)(DIR*)> stream(::opendir(dir.c_str()), ::closedir);
  if (!stream) return;  // no runner recorded yet
  std::vector<std::string> stale;
  while (const dirent* entry = ::readdir(stream.get())) {
    std::string name = entry->d_name;
    if (!name.starts_with(kRunPrefix) || name == own || runner_alive(name)) continue;
    stale.push_back(std::move(name));
  }
  for (const auto& name : stale) {
    if (auto r = backend.remove_stale(name); !r) {
      std::fprintf(stderr, "cela: stale cgroup %s: %s\n", name.c_str(), r.error().message().c_str());
      continue;  // the record stays: the next runner tries again
    }
    ::unlinkat(::dirfd(stream.get()), name.c_str(), 0);
  }
}

}  // namespace cela::cli
