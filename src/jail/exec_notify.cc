#include "jail/exec_notify.h"

#include <linux/audit.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/fs.h"
#include "jail/seccomp.h"

namespace cela::jail {
namespace {

// Reads up to `len` bytes at `addr` of `pid`, page by page so an unmapped page after
// a string's end only shortens the read. Returns what was read.
std::string read_remote(pid_t pid, uint64_t addr, size_t len) {
  std::string out;
  const uint64_t page = 4096;
  while (len > 0 && addr != 0) {
    size_t chunk = std::min<uint64_t>(len, page - (addr % page));
    std::string buf(chunk, '\0');
    iovec local{buf.data(), chunk};
    iovec remote{reinterpret_cast<void*>(addr), chunk};
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) break;
    out.append(buf.data(), static_cast<size_t>(n));
    if (static_cast<size_t>(n) < chunk) break;
    addr += chunk;
    len -= chunk;
  }
  return out;
}

// A NUL-terminated string at `addr`; `cut` set when it was longer than `max`.
std::string read_string(pid_t pid, uint64_t addr, size_t max, bool& cut) {
  std::string out;
  while (out.size() < max) {
    std::string part = read_remote(pid, addr + out.size(), std::min<size_t>(256, max - out.size()));
    if (part.empty()) break;
    auto nul = part.find('\0');
    if (nul != std::string::npos) return out + part.substr(0, nul);
    out += part;
  }
  if (out.size() >= max) cut = true;
  return out;
}

// "NSpid:\t<host>\t...\t<inside>": the innermost is the sandbox's view.
struct StatusFields {
  pid_t inside = 0;
  pid_t ppid = 0;  // host pid of the parent
  uint32_t uid = 0, gid = 0;
};
StatusFields read_status(pid_t pid) {
  StatusFields f;
  auto text = read_file("/proc/" + std::to_string(pid) + "/status");
  if (!text) return f;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string key;
    l >> key;
    if (key == "NSpid:") {
      long v = 0;
      while (l >> v) f.inside = static_cast<pid_t>(v);
    } else if (key == "PPid:") {
      long v = 0;
      l >> v;
      f.ppid = static_cast<pid_t>(v);
    } else if (key == "Uid:") {
      l >> f.uid;
    } else if (key == "Gid:") {
      l >> f.gid;
    }
  }
  return f;
}

std::string read_cgroup(pid_t pid) {
  auto text = read_file("/proc/" + std::to_string(pid) + "/cgroup");
  if (!text) return "";
  std::istringstream in(*text);
  std::string line, first;
  while (std::getline(in, line)) {
    auto colon = line.find(':', line.find(':') + 1);
    if (colon == std::string::npos) continue;
    std::string path = line.substr(colon + 1);
    // An exec's own cgroup may exist in some hierarchies only (hybrid hosts: v1).
    if (path.find("/e-") != std::string::npos) return path;
    if (first.empty() && path.find("/cela/") != std::string::npos) first = path;
  }
  return first;
}

// Reads an execve's path and argv from the stopped process.
void read_exec(const seccomp_notif& req, ExecNotification& n) {
  n.host_pid = static_cast<pid_t>(req.pid);
  bool at = req.data.nr == __NR_execveat;
  n.syscall = at ? "execveat" : "execve";
  uint64_t path_addr = at ? req.data.args[1] : req.data.args[0];
  uint64_t argv_addr = at ? req.data.args[2] : req.data.args[1];
  bool cut = false;
  n.path = read_string(n.host_pid, path_addr, kMaxNotifyArgBytes, cut);
  size_t total = 0;
  for (size_t i = 0; i < kMaxNotifyArgs; ++i) {
    std::string ptr = read_remote(n.host_pid, argv_addr + i * 8, 8);
    if (ptr.size() != 8) break;
    uint64_t p = 0;
    std::memcpy(&p, ptr.data(), 8);
    if (p == 0) break;
    if (total >= kMaxNotifyTotalBytes) {
      n.truncated = true;
      break;
    }
    n.argv.push_back(read_string(n.host_pid, p, std::min(kMaxNotifyArgBytes, kMaxNotifyTotalBytes - total), cut));
    total += n.argv.back().size();
    if (i + 1 == kMaxNotifyArgs) n.truncated = true;
  }
  n.truncated = n.truncated || cut;
  StatusFields st = read_status(n.host_pid);
  n.pid = st.inside;
  n.uid = st.uid;
  n.gid = st.gid;
  if (st.ppid > 0) n.ppid = read_status(st.ppid).inside;
  n.cgroup = read_cgroup(n.host_pid);
}

void read_violation(const seccomp_notif& req, ViolationNotification& v) {
  v.host_pid = static_cast<pid_t>(req.pid);
  v.nr = req.data.nr;
  if (char* name = seccomp_syscall_resolve_num_arch(SCMP_ARCH_X86_64, req.data.nr)) {
    v.syscall = name;
    std::free(name);
  } else {
    v.syscall = "syscall " + std::to_string(req.data.nr);
  }
  for (size_t i = 0; i < v.args.size(); ++i) v.args[i] = req.data.args[i];
  StatusFields st = read_status(v.host_pid);
  v.pid = st.inside;
  v.uid = st.uid;
  v.gid = st.gid;
  v.cgroup = read_cgroup(v.host_pid);
}

}  // namespace

Result<std::optional<Notification>> take_notification(int listener) {
  seccomp_notif req{};
  std::memset(&req, 0, sizeof req);
  if (::ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
    // ENOENT: the process was killed between the wake-up and the receive.
    if (errno == ENOENT || errno == EINTR) return std::optional<Notification>();
    return sys_fail("receive a seccomp notification");
  }
  // Only an execve of this architecture goes on; the policy kills other architectures,
  // so anything else here is a denial, whatever the program said about it.
  const bool exec = req.data.arch == AUDIT_ARCH_X86_64 && (req.data.nr == __NR_execve || req.data.nr == __NR_execveat);
  Notification n;
  if (exec) read_exec(req, n.emplace<ExecNotification>());
  else read_violation(req, n.emplace<ViolationNotification>());
  // Still the same stopped process? Only then are the reads its own.
  uint64_t id = req.id;
  bool valid = ::ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0;
  seccomp_notif_resp resp{};
  resp.id = req.id;
  if (exec) resp.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  else resp.error = -kViolationErrno;
  // ENOENT: it was killed meanwhile; nothing to answer.
  (void)::ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, &resp);
  if (!valid) return std::optional<Notification>();
  return std::optional<Notification>(std::move(n));
}

}  // namespace cela::jail
