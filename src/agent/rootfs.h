// The sandbox's root filesystem, built in two halves.
//
// Host half (jail/mounts.h, prepare_rootfs, run by host root after the child's user
// namespace has its id maps): every template layer and host bind becomes a detached,
// read-only, idmapped mount, the writable layer a detached filesystem, and an overlay
// is created from those fds. Nothing is attached to any host path.
//
// Child half (here, enter_rootfs, run by the sandbox's init as user-namespace root):
// moves the overlay and binds into its private mount namespace, adds /proc (masked),
// a minimal /dev, then pivot_root and detaches the old root.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace cela::agent {

struct RootfsSpec {
  std::vector<std::string> layers;                         // host dirs, bottom first
  std::vector<std::pair<std::string, std::string>> binds;  // host source -> target inside
  uint64_t disk_bytes = 1ull << 30;                        // size of the writable layer
  uint64_t disk_inodes = 0;                                // 0: derived from disk_bytes
  uint64_t shm_bytes = 64ull << 20;                        // /dev/shm tmpfs size
  // Ptys of the private devpts (its `max=`): the host-wide kernel.pty.max is shared by
  // every devpts instance, so each session gets a small share of its own.
  uint32_t pty_max = 64;
};

struct RootfsMounts {
  UniqueFd overlay;
  // The writable layer's upper dir (on its detached tmpfs), for the host: holding it
  // keeps the layer reachable for snapshots after the sandbox's processes are gone.
  UniqueFd upper;
  std::vector<std::pair<std::string, UniqueFd>> binds;  // target inside -> detached mount
};

// Child side. `staging` is an empty directory visible in the child's (private) mount
// namespace where the new root is attached before pivot_root. On failure the Error's
// context names the step.
Result<void> enter_rootfs(RootfsMounts mounts, const RootfsSpec& spec, const std::string& staging);

// The directory used as `staging` (created by the host side before clone).
inline constexpr const char* kStagingDir = "/run/cela/newroot";

}  // namespace cela::agent
