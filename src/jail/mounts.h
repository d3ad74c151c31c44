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

#include "agent/rootfs.h"
#include "common/error.h"

namespace cela::jail {

using agent::RootfsMounts;
using agent::RootfsSpec;
using agent::kStagingDir;

// `userns_fd` is the sandbox's user namespace (maps already written), `root_uid` the
// host uid that is root inside (owner of the upper dir).
Result<RootfsMounts> prepare_rootfs(const RootfsSpec& spec, int userns_fd, uint32_t root_uid);

}  // namespace cela::jail
