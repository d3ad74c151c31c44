#include "jail/mounts.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "agent/mount_api.h"

namespace cela::jail {
using agent::sys_fsconfig;
using agent::sys_fsmount;
using agent::sys_fsopen;
using agent::sys_mount_setattr;
using agent::sys_open_tree;
namespace {

// A detached, recursive, read-only clone of `path` whose ids are shifted through
// `userns_fd`: host root's files show as root inside. Read-only is not optional: a
// writable idmapped mount would let in-sandbox root write as host uid 0.
Result<UniqueFd> idmapped_readonly_clone(const std::string& path, int userns_fd) {
  UniqueFd tree(sys_open_tree(AT_FDCWD, path.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
  if (!tree) return sys_fail("open_tree " + path);
  mount_attr attr{};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<uint64_t>(userns_fd);
  if (sys_mount_setattr(tree.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr) != 0)
    return sys_fail("idmap read-only mount of " + path);
  return tree;
}

Result<UniqueFd> make_tmpfs(const std::string& what, const std::string& size, const std::string& inodes,
                            const std::string& mode) {
  UniqueFd fs(sys_fsopen("tmpfs", FSOPEN_CLOEXEC));
  if (!fs) return sys_fail("fsopen tmpfs for " + what);
  auto set = [&](const char* key, const std::string& value) -> Result<void> {
    if (value.empty()) return {};
    if (sys_fsconfig(fs.get(), FSCONFIG_SET_STRING, key, value.c_str(), 0) != 0)
      return sys_fail(std::string("tmpfs ") + key + "=" + value + " for " + what);
    return {};
  };
  if (auto r = set("size", size); !r) return std::unexpected(r.error());
  if (auto r = set("nr_inodes", inodes); !r) return std::unexpected(r.error());
  if (auto r = set("mode", mode); !r) return std::unexpected(r.error());
  if (sys_fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return sys_fail("create tmpfs for " + what);
  UniqueFd mnt(sys_fsmount(fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV));
  if (!mnt) return sys_fail("fsmount tmpfs for " + what);
  return mnt;
}

}  // namespace

RootfsSpec fit_tmpfs_to_memory(RootfsSpec spec, uint64_t memory_bytes) {
  if (memory_bytes == 0) return spec;
  constexpr uint64_t kMinReserve = 64ull << 20;
  const uint64_t reserve = std::min(memory_bytes / 2, std::max(kMinReserve, memory_bytes / 8));
  const uint64_t room = memory_bytes - reserve;
  spec.shm_bytes = std::min(spec.shm_bytes, room / 4);
  spec.disk_bytes = std::min(spec.disk_bytes, room - spec.shm_bytes);
  return spec;
}

Result<RootfsMounts> prepare_rootfs(const RootfsSpec& spec, int userns_fd, uint32_t root_uid, int disk_root,
                                    const std::vector<VolumeBind>& volumes) {
  if (spec.layers.empty()) return fail(ErrorCode::invalid_argument, "template has no layers");
  RootfsMounts out;

  // The writable layer: upper and work dirs on the disk-backed layer, or on a tmpfs
  // sized by the disk limit.
  UniqueFd tmp;
  int layer = disk_root;
  if (layer < 0) {
    uint64_t inodes = spec.disk_inodes ? spec.disk_inodes : std::max<uint64_t>(spec.disk_bytes / 4096, 1024);
    auto made = make_tmpfs("writable layer", std::to_string(spec.disk_bytes), std::to_string(inodes), "0755");
    if (!made) return std::unexpected(made.error());
    tmp = std::move(*made);
    layer = tmp.get();
    for (const char* dir : {"upper", "work"}) {
      if (::mkdirat(layer, dir, 0755) != 0) return sys_fail(std::string("mkdir ") + dir);
    }
  }
  // The overlay's root directory is the upper dir's: root inside owns it.
  if (::fchownat(layer, "upper", root_uid, root_uid, 0) != 0) return sys_fail("chown upper dir");
  UniqueFd upper(::openat(layer, "upper", O_DIRECTORY | O_CLOEXEC));
  UniqueFd work(::openat(layer, "work", O_DIRECTORY | O_CLOEXEC));
  if (!upper || !work) return sys_fail("open upper/work dir");

  UniqueFd ovl(sys_fsopen("overlay", FSOPEN_CLOEXEC));
  if (!ovl) return sys_fail("fsopen overlay");
  // lowerdir+ appends below the previous one: add the top layer first. The layer fds
  // stay open until the overlay exists: closing the last fd of a detached mount
  // dissolves it, and overlay could no longer clone it ("failed to clone lowerpath").
  std::vector<UniqueFd> layers;
  for (auto it = spec.layers.rbegin(); it != spec.layers.rend(); ++it) {
    auto layer = idmapped_readonly_clone(*it, userns_fd);
    if (!layer) return std::unexpected(layer.error());
    if (sys_fsconfig(ovl.get(), FSCONFIG_SET_FD, "lowerdir+", nullptr, layer->get()) != 0)
      return sys_fail("overlay lowerdir+ " + *it);
    layers.push_back(std::move(*layer));
  }
  if (sys_fsconfig(ovl.get(), FSCONFIG_SET_FD, "upperdir", nullptr, upper.get()) != 0)
    return sys_fail("overlay upperdir");
  if (sys_fsconfig(ovl.get(), FSCONFIG_SET_FD, "workdir", nullptr, work.get()) != 0)
    return sys_fail("overlay workdir");
  if (sys_fsconfig(ovl.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0)
    return sys_fail("create overlay");
  out.overlay.reset(sys_fsmount(ovl.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV));
  if (!out.overlay) return sys_fail("fsmount overlay");
  out.upper = std::move(upper);

  for (const auto& [source, target] : spec.binds) {
    auto bind = idmapped_readonly_clone(source, userns_fd);
    if (!bind) return std::unexpected(bind.error());
    out.binds.emplace_back(target, std::move(*bind));
  }
  for (const VolumeBind& v : volumes) {
    UniqueFd clone(sys_open_tree(v.root, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
    if (!clone) return sys_fail("clone the mount of the volume for " + v.target);
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID | (v.read_only ? MOUNT_ATTR_RDONLY : 0);
    attr.userns_fd = static_cast<uint64_t>(userns_fd);
    if (sys_mount_setattr(clone.get(), "", AT_EMPTY_PATH, &attr) != 0)
      return sys_fail("idmap the volume for " + v.target);
    out.binds.emplace_back(v.target, std::move(clone));
  }
  return out;
}

}  // namespace cela::jail
