// The host half of the sandbox's root filesystem (the child half, and the types both
// share, are in agent/rootfs.h).
//
// prepare_rootfs runs as host root after the child's user namespace has its id maps:
// every template layer and host bind becomes a detached, read-only, idmapped mount
// (open_tree + mount_setattr), the per-sandbox upper and work dirs live on a detached
// tmpfs sized by the disk limit, and an overlay is created from those fds (fsconfig
// FSCONFIG_SET_FD). Nothing is attached to any host path, so a crash leaves no host
// mount behind: the mounts live only in the fds and, once moved, in the sandbox's
// mount namespace, and vanish with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/rootfs.h"
#include "common/error.h"

namespace cela::jail {

using agent::RootfsMounts;
using agent::RootfsSpec;
using agent::kStagingDir;

// A volume's filesystem (a detached mount the caller holds) to show at `target`.
struct VolumeBind {
  int root = -1;
  std::string target;
  bool read_only = false;
};

// `userns_fd` is the sandbox's user namespace (maps already written), `root_uid` the
// host uid that is root inside (owner of the upper dir). `disk_root` >= 0 is a
// disk-backed writable layer (jail/disk.h: a detached ext4 mount holding empty
// upper/ and work/ dirs) used instead of a tmpfs. Each volume becomes a detached clone
// of its mount, idmapped through the sandbox's user namespace (files keep their
// in-sandbox owner across sessions of different uid slots), nosuid, nodev, and
// read-only when asked.
Result<RootfsMounts> prepare_rootfs(const RootfsSpec& spec, int userns_fd, uint32_t root_uid, int disk_root = -1,
                                    const std::vector<VolumeBind>& volumes = {});

// The writable layer and /dev/shm are tmpfs: their pages count against the sandbox's
// memory limit and, with swap off, can be neither swapped nor reclaimed. Filled past
// what the processes need, they would leave the OOM killer nothing to free, and every
// later exec would be killed on start. So together they hold at most the memory limit
// minus a reserve for processes (an eighth, at least 64 MiB, at most half): filling
// them gives ENOSPC, and the session stays usable. `memory_bytes` 0 (no limit) leaves
// `spec` as it is.
RootfsSpec fit_tmpfs_to_memory(RootfsSpec spec, uint64_t memory_bytes);

}  // namespace cela::jail
