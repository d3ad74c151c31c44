// The child half of the sandbox's root filesystem (agent/rootfs.h).
#include "agent/rootfs.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#include "agent/mount_api.h"

namespace cela::agent {
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
// read-only tmpfs) and the writable kernel knobs read-only. cmdline (the host's boot
// command line) and locks (the host's file locks) read as empty files.
Result<void> mount_proc(const std::string& root) {
  std::string proc = root + "/proc";
  if (auto r = ensure_dir(proc, 0555); !r) return r;
  if (auto r = do_mount("proc", proc, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr, "mount proc"); !r)
    return r;
  for (const char* file : {"kcore", "keys", "timer_list", "sched_debug", "latency_stats", "kmsg",
                           "kallsyms", "sysrq-trigger", "config.gz", "kpagecount", "kpageflags",
                           "kpagecgroup", "pagetypeinfo", "slabinfo", "vmallocinfo", "cmdline", "locks"}) {
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
  // /run/secrets: a small tmpfs of its own for secret files the daemon writes (session
  // /secret_grants.h), so no secret lands on the writable layer. Mounted in every
  // sandbox (a pooled one does not know its grants yet).
  // Symlinks there (a snapshot's template may hold any) would resolve against the host's
  // root at this point: then there is no /run/secrets, and file grants are refused.
  auto plain_dir = [](const std::string& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  };
  if (auto r = ensure_dir(staging + "/run", 0755); !r) return r;
  if (plain_dir(staging + "/run"))
    if (auto r = ensure_dir(staging + "/run/secrets", 0755); !r) return r;
  if (plain_dir(staging + "/run") && plain_dir(staging + "/run/secrets"))
    if (auto r = do_mount("tmpfs", staging + "/run/secrets", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                          "mode=0755,size=4m,nr_inodes=128", "mount /run/secrets");
        !r)
      return r;

  // pivot_root(".", ".") stacks the old root on top of the new one; detaching "."
  // then removes the old root (and every host mount under it) from this namespace.
  if (::chdir(staging.c_str()) != 0) return sys_fail("chdir " + staging);
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return sys_fail("pivot_root");
  if (::umount2(".", MNT_DETACH) != 0) return sys_fail("detach old root");
  if (::chdir("/") != 0) return sys_fail("chdir /");
  return {};
}

}  // namespace cela::agent
