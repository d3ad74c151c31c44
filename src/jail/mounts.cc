#include "jail/mounts.h"

#include <fcntl.h>
#include <linux/mount.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

namespace cela::jail {
namespace {

// glibc 2.36 has no wrappers for the new mount API.
int sys_open_tree(int dfd, const char* path, unsigned flags) {
  return static_cast<int>(::syscall(SYS_open_tree, dfd, path, flags));
}
int sys_mount_setattr(int dfd, const char* path, unsigned flags, mount_attr* attr) {
  return static_cast<int>(::syscall(SYS_mount_setattr, dfd, path, flags, attr, sizeof *attr));
}
int sys_fsopen(const char* fs, unsigned flags) {
  return static_cast<int>(::syscall(SYS_fsopen, fs, flags));
}
int sys_fsconfig(int fd, unsigned cmd, const char* key, const void* value, int aux) {
  return static_cast<int>(::syscall(SYS_fsconfig, fd, cmd, key, value, aux));
}
int sys_fsmount(int fd, unsigned flags, unsigned attrs) {
  return static_cast<int>(::syscall(SYS_fsmount, fd, flags, attrs));
}
int sys_move_mount(int from_dfd, const char* from, int to_dfd, const char* to, unsigned flags) {
  return static_cast<int>(::syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags));
}

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

Result<RootfsMounts> prepare_rootfs(const RootfsSpec& spec, int userns_fd, uint32_t root_uid) {
  if (spec.layers.empty()) return fail(ErrorCode::invalid_argument, "template has no layers");
  RootfsMounts out;

  // The writable layer: upper and work dirs on a tmpfs sized by the disk limit.
  uint64_t inodes = spec.disk_inodes ? spec.disk_inodes : std::max<uint64_t>(spec.disk_bytes / 4096, 1024);
  auto tmp = make_tmpfs("writable layer", std::to_string(spec.disk_bytes), std::to_string(inodes), "0755");
  if (!tmp) return std::unexpected(tmp.error());
  for (const char* dir : {"upper", "work"}) {
    if (::mkdirat(tmp->get(), dir, 0755) != 0) return sys_fail(std::string("mkdir ") + dir);
  }
  // The overlay's root directory is the upper dir's: root inside owns it.
  if (::fchownat(tmp->get(), "upper", root_uid, root_uid, 0) != 0) return sys_fail("chown upper dir");
  UniqueFd upper(::openat(tmp->get(), "upper", O_DIRECTORY | O_CLOEXEC));
  UniqueFd work(::openat(tmp->get(), "work", O_DIRECTORY | O_CLOEXEC));
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
  return out;
}

namespace {

Result<void> do_mount(const char* source, const std::string& target, const char* type, unsigned long flags,
                      const char* data, const char* step) {
  if (::mount(source, target.c_str(), type, flags, data) != 0) return sys_fail(std::string(step) + " " + target);
  return {};
}

// Creates `path` with exactly `mode` (chmod after mkdir: the umask would cut it).
Result<void> ensure_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0) {
    if (errno == EEXIST) return {};
    return sys_fail("mkdir " + path);
  }
  if (::chmod(path.c_str(), mode) != 0) return sys_fail("chmod " + path);
  return {};
}

Result<void> ensure_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return sys_fail("create " + path);
  ::close(fd);
  return {};
}

// Fresh /proc of the sandbox's pid namespace, with the kernel-global or
// information-leaking entries masked (files by /dev/null, dirs by an empty
// read-only tmpfs) and the writable kernel knobs read-only.
Result<void> mount_proc(const std::string& root) {
  std::string proc = root + "/proc";
  if (auto r = ensure_dir(proc, 0555); !r) return r;
  if (auto r = do_mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr, "mount proc"); !r)
    return r;
  for (const char* file : {"kcore", "keys", "timer_list", "sched_debug", "latency_stats", "kmsg",
                           "kallsyms", "sysrq-trigger", "config.gz", "kpagecount", "kpageflags",
                           "kpagecgroup", "pagetypeinfo", "slabinfo", "vmallocinfo"}) {
    std::string path = proc + "/" + file;
    if (::access(path.c_str(), F_OK) != 0) continue;
    if (auto r = do_mount("/dev/null", path, nullptr, MS_BIND, nullptr, "mask"); !r) return r;
  }
  for (const char* dir : {"acpi", "scsi", "asound", "firmware", "driver"}) {
    std::string path = proc + "/" + dir;
    if (::access(path.c_str(), F_OK) != 0) continue;
    if (auto r = do_mount("tmpfs", path, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0",
                          "mask");
        !r)
      return r;
  }
  for (const char* dir : {"sys", "irq", "bus", "fs"}) {
    std::string path = proc + "/" + dir;
    if (::access(path.c_str(), F_OK) != 0) continue;
    if (auto r = do_mount(path.c_str(), path, nullptr, MS_BIND | MS_REC, nullptr, "bind"); !r) return r;
    if (auto r = do_mount(nullptr, path, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                          nullptr, "read-only");
        !r)
      return r;
  }
  return {};
}

// A minimal /dev: a small tmpfs holding binds of the harmless host nodes, a private
// devpts holding at most `pty_max` ptys, a tmpfs /dev/shm. Made read-only at the end
// (pts and shm stay writable).
Result<void> mount_dev(const std::string& root, uint64_t shm_bytes, uint32_t pty_max) {
  std::string dev = root + "/dev";
  if (auto r = ensure_dir(dev, 0755); !r) return r;
  if (auto r = do_mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64",
                        "mount /dev tmpfs");
      !r)
    return r;
  for (const char* node : {"null", "zero", "full", "random", "urandom", "tty"}) {
    std::string target = dev + "/" + node;
    if (auto r = ensure_file(target); !r) return r;
    if (auto r = do_mount((std::string("/dev/") + node).c_str(), target, nullptr, MS_BIND, nullptr, "bind");
        !r)
      return r;
  }
  if (auto r = ensure_dir(dev + "/pts", 0755); !r) return r;
  std::string pts_opts = "newinstance,ptmxmode=0666,mode=0620,max=" + std::to_string(pty_max);
  if (auto r = do_mount("devpts", dev + "/pts", "devpts", MS_NOSUID | MS_NOEXEC, pts_opts.c_str(), "mount devpts");
      !r)
    return r;
  if (auto r = ensure_dir(dev + "/shm", 01777); !r) return r;
  std::string shm_opts = "mode=1777,size=" + std::to_string(shm_bytes);
  if (auto r = do_mount("tmpfs", dev + "/shm", "tmpfs", MS_NOSUID | MS_NODEV, shm_opts.c_str(), "mount /dev/shm");
      !r)
    return r;
  struct Link {
    const char* target;
    const char* name;
  };
  for (Link l : {Link{"pts/ptmx", "ptmx"}, Link{"/proc/self/fd", "fd"}, Link{"/proc/self/fd/0", "stdin"},
                 Link{"/proc/self/fd/1", "stdout"}, Link{"/proc/self/fd/2", "stderr"}}) {
    if (::symlink(l.target, (dev + "/" + l.name).c_str()) != 0) return sys_fail(std::string("symlink /dev/") + l.name);
  }
  return do_mount(nullptr, dev, nullptr, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k",
                  "read-only /dev");
}

}  // namespace

Result<void> enter_rootfs(RootfsMounts mounts, const RootfsSpec& spec, const std::string& staging) {
  if (sys_move_mount(mounts.overlay.get(), "", AT_FDCWD, staging.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
    return sys_fail("attach overlay at " + staging);
  for (auto& [target, fd] : mounts.binds) {
    std::string path = staging + target;
    if (auto r = ensure_dir(path, 0755); !r) return r;
    if (sys_move_mount(fd.get(), "", AT_FDCWD, path.c_str(), MOVE_MOUNT_F_EMPTY_PATH) != 0)
      return sys_fail("attach bind at " + target);
  }
  // /proc needs the old root still attached: the kernel allows a new proc mount in a
  // user namespace only while a fully visible proc exists in the mount namespace.
  if (auto r = mount_proc(staging); !r) return r;
  if (auto r = mount_dev(staging, spec.shm_bytes, spec.pty_max); !r) return r;
  if (auto r = ensure_dir(staging + "/tmp", 01777); !r) return r;

  // pivot_root(".", ".") stacks the old root on top of the new one; detaching "."
  // then removes the old root (and every host mount under it) from this namespace.
  if (::chdir(staging.c_str()) != 0) return sys_fail("chdir " + staging);
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return sys_fail("pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return sys_fail("detach old root");
  if (::chdir("/") != 0) return sys_fail("chdir /");
  return {};
}

}  // namespace cela::jail
