// The new mount API (open_tree, mount_setattr, fsopen, fsconfig, fsmount,
// move_mount) as raw syscalls: glibc 2.36 has no wrappers. Used by both halves of
// the root filesystem (jail/mounts.cc on the host, agent/rootfs.cc inside).
#pragma once

#include <linux/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cela::agent {

inline int sys_open_tree(int dfd, const char* path, unsigned flags) {
  return static_cast<int>(::syscall(SYS_open_tree, dfd, path, flags));
}
inline int sys_mount_setattr(int dfd, const char* path, unsigned flags, mount_attr* attr) {
  return static_cast<int>(::syscall(SYS_mount_setattr, dfd, path, flags, attr, sizeof *attr));
}
inline int sys_fsopen(const char* fs, unsigned flags) { return static_cast<int>(::syscall(SYS_fsopen, fs, flags)); }
inline int sys_fsconfig(int fd, unsigned cmd, const char* key, const void* value, int aux) {
  return static_cast<int>(::syscall(SYS_fsconfig, fd, cmd, key, value, aux));
}
inline int sys_fsmount(int fd, unsigned flags, unsigned attrs) {
  return static_cast<int>(::syscall(SYS_fsmount, fd, flags, attrs));
}
inline int sys_move_mount(int from_dfd, const char* from, int to_dfd, const char* to, unsigned flags) {
  return static_cast<int>(::syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags));
}

}  // namespace cela::agent
