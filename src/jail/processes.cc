#include "jail/processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <map>

#include "jail/cgroup.h"

namespace cela::jail {
namespace {

// Bounded reads of /proc files: a command line can be as long as the process made it.
constexpr size_t kStatusMax = 16 * 1024;
constexpr size_t kCmdlineMax = 64 * 1024;

// Reads at most `max` bytes of `name` under the /proc/<pid> directory `dir`.
Result<std::string> read_bounded(int dir, const char* name, size_t max) {
  UniqueFd fd(::openat(dir, name, O_RDONLY | O_CLOEXEC));
  if (!fd) return sys_fail(std::string("open ") + name);
  std::string out(max, '\0');
  size_t got = 0;
  while (got < max) {
    ssize_t n = ::read(fd.get(), out.data() + got, max - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_fail(std::string("read ") + name);
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

std::vector<std::string_view> fields_of(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) out.push_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

template <class T>
bool number(std::string_view text, T& out) {
  auto r = std::from_chars(text.data(), text.data() + text.size(), out);
  return r.ec == std::errc() && r.ptr == text.data() + text.size();
}

// How deep the daemon's own pid namespace is: the index of a child namespace's pid in
// every NSpid line it reads.
size_t own_pid_level() {
  static const size_t level = [] {
    UniqueFd self(::open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC));
    auto text = self ? read_bounded(self.get(), "status", kStatusMax) : Result<std::string>(std::string());
    auto st = text ? parse_proc_status(*text) : Result<ProcStatus>(ProcStatus{});
    return st && !st->nspid.empty() ? st->nspid.size() : size_t{1};
  }();
  return level;
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_signal(int pidfd, int sig) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0)); }

}  // namespace

Result<ProcStatus> parse_proc_status(std::string_view text) {
  ProcStatus st;
  bool have_pid = false, have_ppid = false, have_uid = false;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view key = line.substr(0, colon);
    std::vector<std::string_view> values = fields_of(line.substr(colon + 1));
    if (key == "Name") {
      // comm may hold spaces: everything after the tab
      std::string_view rest = line.substr(colon + 1);
      while (!rest.empty() && (rest.front() == '\t' || rest.front() == ' ')) rest.remove_prefix(1);
      st.name = std::string(rest);
    } else if (key == "NSpid") {
      for (auto v : values) {
        pid_t p = 0;
        if (!number(v, p)) return fail(ErrorCode::invalid_argument, "malformed NSpid in /proc status");
        st.nspid.push_back(p);
      }
      have_pid = !st.nspid.empty();
    } else if (key == "PPid") {
      have_ppid = values.size() == 1 && number(values[0], st.ppid);
    } else if (key == "Uid") {
      have_uid = values.size() == 4 && number(values[1], st.euid);
    }
  }
  if (!have_pid || !have_ppid || !have_uid)
    return fail(ErrorCode::invalid_argument, "/proc status without NSpid, PPid or Uid");
  return st;
}

std::vector<std::string> split_cmdline(std::string_view raw) {
  std::vector<std::string> argv;
  if (!raw.empty() && raw.back() == '\0') raw.remove_suffix(1);
  if (raw.empty()) return argv;
  size_t start = 0;
  for (;;) {
    size_t nul = raw.find('\0', start);
    argv.emplace_back(raw.substr(start, nul == std::string_view::npos ? std::string_view::npos : nul - start));
    if (nul == std::string_view::npos) break;
    start = nul + 1;
  }
  return argv;
}

uint32_t inside_uid(uint32_t host, uint32_t base) {
  return host >= base && host - base < 65536 ? host - base : 65534;
}

SandboxProcesses::SandboxProcesses(std::string cgroup_dir, pid_t init_host_pid, UniqueFd init_pidfd,
                                   uint32_t uid_base)
    : dir_(std::move(cgroup_dir)),
      init_host_pid_(init_host_pid),
      init_pidfd_(std::move(init_pidfd)),
      uid_base_(uid_base),
      level_(own_pid_level()) {}

Result<void> SandboxProcesses::check_alive() const {
  if (pidfd_signal(init_pidfd_.get(), 0) != 0) return fail(ErrorCode::gone, "the sandbox has ended");
  return {};
}

Result<std::vector<SandboxProcesses::Found>> SandboxProcesses::members() const {
  if (auto alive = check_alive(); !alive) return std::unexpected(alive.error());
  auto listed = list_members(dir_);
  if (!listed) return std::unexpected(listed.error());
  std::vector<Found> out;
  for (const CgroupMember& m : *listed) {
    UniqueFd dir(::open(("/proc/" + std::to_string(m.pid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!dir) continue;  // exited since the cgroup was read
    auto text = read_bounded(dir.get(), "status", kStatusMax);
    if (!text) continue;
    auto st = parse_proc_status(*text);
    // In the host's pid namespace (the daemon's helpers): not the sandbox's.
    if (!st || st->nspid.size() <= level_) continue;
    out.push_back({m.pid, std::move(*st), m.child});
  }
  return out;
}

Result<std::vector<SandboxProcess>> SandboxProcesses::list() const {
  auto found = members();
  if (!found) return std::unexpected(found.error());
  std::map<pid_t, pid_t> inside_of;  // host pid -> pid inside
  for (const Found& f : *found) inside_of[f.host_pid] = f.status.nspid[level_];
  std::vector<SandboxProcess> out;
  for (const Found& f : *found) {
    SandboxProcess p;
    p.pid = f.status.nspid[level_];
    if (f.host_pid != init_host_pid_) {
      if (auto it = inside_of.find(f.status.ppid); it != inside_of.end()) {
        p.ppid = it->second;
      } else if (f.status.ppid == init_host_pid_) {
        p.ppid = 1;
      } else if (UniqueFd parent(::open(("/proc/" + std::to_string(f.status.ppid)).c_str(),
                                        O_PATH | O_DIRECTORY | O_CLOEXEC));
                 parent) {
        // A parent that joined after the tree was read.
        auto text = read_bounded(parent.get(), "status", kStatusMax);
        auto st = text ? parse_proc_status(*text) : Result<ProcStatus>(std::unexpected(text.error()));
        if (st && st->nspid.size() > level_) p.ppid = st->nspid[level_];
      }
    }
    p.uid = inside_uid(f.status.euid, uid_base_);
    p.name = f.status.name;
    p.cgroup = f.cgroup;
    UniqueFd dir(::open(("/proc/" + std::to_string(f.host_pid)).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (dir)
      if (auto raw = read_bounded(dir.get(), "cmdline", kCmdlineMax); raw) p.argv = split_cmdline(*raw);
    out.push_back(std::move(p));
  }
  std::sort(out.begin(), out.end(), [](const SandboxProcess& a, const SandboxProcess& b) { return a.pid < b.pid; });
  return out;
}

Result<void> SandboxProcesses::signal(pid_t pid, int sig) const {
  if (pid == 1) return fail(ErrorCode::permission_denied, "pid 1 is the sandbox's init; it cannot be signalled");
  auto found = members();
  if (!found) return std::unexpected(found.error());
  auto it = std::find_if(found->begin(), found->end(), [&](const Found& f) { return f.status.nspid[level_] == pid; });
  if (it == found->end()) return fail(ErrorCode::not_found, "no process " + std::to_string(pid) + " in this session");
  UniqueFd pidfd(pidfd_open(it->host_pid));
  if (!pidfd) return fail(ErrorCode::not_found, "process " + std::to_string(pid) + " has exited");
  // The pidfd now names one process for good. Check that the host pid still belongs to
  // the sandbox, under the same pid inside: if the process we found had exited and its
  // host pid been reused before pidfd_open, the reuser fails this check (or, if it also
  // passes, the pidfd names the dead one and the signal goes nowhere).
  auto again = members();
  if (!again) return std::unexpected(again.error());
  bool still = std::any_of(again->begin(), again->end(), [&](const Found& f) {
    return f.host_pid == it->host_pid && f.status.nspid[level_] == pid;
  });
  if (!still) return fail(ErrorCode::not_found, "process " + std::to_string(pid) + " has exited");
  if (pidfd_signal(pidfd.get(), sig) != 0) {
    if (errno == ESRCH) return fail(ErrorCode::not_found, "process " + std::to_string(pid) + " has exited");
    return sys_fail("signal process " + std::to_string(pid));
  }
  return {};
}

}  // namespace cela::jail
