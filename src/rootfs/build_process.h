// Runs a template build tool (debootstrap, apt-get inside the new tree's chroot) in a
// child process with its own mount namespace. debootstrap mounts /proc and /sys into
// the target and the chroot step needs /proc, /dev and the .deb cache bound in; doing
// all of that in a private namespace means no mount ever appears on, or leaks to, the
// host: the mounts vanish with the namespace when the last process in it exits.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"

namespace cela::rootfs {

struct BuildMount {
  std::string source;
  std::string target;       // host path (before the chroot)
  std::string fstype;       // empty for a bind
  unsigned long flags = 0;  // MS_* (MS_BIND, MS_REC, MS_NOSUID…)
};

struct BuildCommand {
  std::vector<std::string> argv;   // argv[0] is an absolute path (inside `chroot` if set)
  std::vector<std::string> env;    // the complete environment, "NAME=value"
  std::vector<BuildMount> mounts;  // made in the private namespace, in order
  std::string chroot;              // empty: stay in the host root
  int output_fd = -1;              // receives stdout and stderr; -1: inherit
};

// fork; in the child: unshare(CLONE_NEWNS), make every mount MS_PRIVATE (so nothing
// propagates back to the host), make `mounts`, chroot, stdin from /dev/null, execve.
// Waits for it. A failing setup step comes back as that step's errno; a non-zero
// exit as an error naming the status.
Result<void> run_in_private_mount_ns(const BuildCommand& command);

}  // namespace cela::rootfs
