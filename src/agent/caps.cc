// Capability bounding set and capset(2) for sandbox processes. Both run between
// fork and execve, so they use raw syscalls and fixed-size data only (no libcap).
#include "agent/caps.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdint>

namespace cela::agent {
namespace {

// Docker's default capability set minus NET_RAW (raw sockets: spoofing, sniffing
// the session's own netns is still a kernel attack surface) and MKNOD (device nodes).
constexpr std::array kKept = {
    CAP_CHOWN,             // apt/dpkg chown files
    CAP_DAC_OVERRIDE,      // in-sandbox root reads and writes any file of the session
    CAP_FOWNER,            // chmod/utime on files root does not own
    CAP_FSETID,            // keep setuid/setgid bits when root edits such files
    CAP_KILL,              // signal processes of other sandbox uids
    CAP_SETGID,            // sudo, apt dropping to _apt
    CAP_SETUID,            //   "
    CAP_SETPCAP,           // lowering the bounding set again (sudo, setpriv)
    CAP_NET_BIND_SERVICE,  // servers on ports < 1024
    CAP_SYS_CHROOT,        // chroot inside the session
    CAP_AUDIT_WRITE,       // as Docker; moot: seccomp refuses netlink audit sockets
    CAP_SETFCAP,           // dpkg installs binaries with file capabilities
};

constexpr uint64_t kept_mask() {
  uint64_t mask = 0;
  for (int cap : kKept) mask |= uint64_t{1} << cap;
  return mask;
}

// Past the last capability the kernel knows, PR_CAPBSET_DROP fails with EINVAL.
// 64 bounds the loop: capability masks are 64 bits wide.
constexpr int kCapabilityLimit = 64;

}  // namespace

const std::vector<int>& kept_capabilities() {
  static const auto& caps = *new std::vector<int>(kKept.begin(), kKept.end());
  return caps;
}

int drop_bounding_set() {
  constexpr uint64_t keep = kept_mask();
  for (int cap = 0; cap < kCapabilityLimit; ++cap) {
    if (keep & (uint64_t{1} << cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // cap > /proc/sys/kernel/cap_last_cap: done
      return errno;
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
  return 0;
}

int set_capabilities(const std::vector<int>& keep) {
  uint64_t mask = 0;
  for (int cap : keep) {
    if (cap < 0 || cap >= kCapabilityLimit) return EINVAL;
    mask |= uint64_t{1} << cap;
  }
  __user_cap_header_struct header{};
  header.version = _LINUX_CAPABILITY_VERSION_3;
  header.pid = 0;  // the calling thread
  // Version 3 splits each 64-bit set into two 32-bit words, low word first.
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  for (int i = 0; i < _LINUX_CAPABILITY_U32S_3; ++i) {
    const auto word = static_cast<uint32_t>(mask >> (32 * i));
    data[i].effective = word;
    data[i].permitted = word;
    // Inheritable stays empty: nothing may cross execve through file-inheritable or
    // ambient capabilities, and the kernel would refuse (EPERM) an inheritable bit
    // outside the bounding set.
    data[i].inheritable = 0;
  }
  if (::syscall(SYS_capset, &header, data) != 0) return errno;
  return 0;
}

}  // namespace cela::agent
