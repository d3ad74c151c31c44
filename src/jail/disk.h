// Disk-backed filesystems for sandboxes: ext4 images on loop devices, mounted with
// fsmount and never attached to a host path.
//
// Why ext4 on loop: this kernel has no XFS project quotas and no ext4 quotas, so a
// size limit the kernel enforces (ENOSPC) on disk needs a filesystem of that size.
// An image per sandbox is the unit: its size is the limit, its block counters are the
// sandbox's use, its loop device's write counter the sandbox's writes.
//
// Lifetime without cleanup: a writable layer's image is an unlinked file (O_TMPFILE),
// its loop device is attached with LO_FLAGS_AUTOCLEAR, its mount is detached. When the
// sandbox's mount namespace and the daemon's descriptors are gone, the kernel unmounts
// it, the loop device clears itself and the file's blocks are freed: a crash leaves no
// mount, no image and no bound loop device. The ledger (LoopLedger) records every
// device this process attached so that recovery can check that, and detach one only
// if it is still bound to the very inode recorded: a loop device of anyone else is
// never touched.
#pragma once

#include <cstdint>
#include <string>

#include "common/error.h"
#include "common/fd.h"

namespace cela::jail {

struct LoopDevice {
  UniqueFd fd;  // /dev/loopN, open: the device stays bound while it is held
  int number = -1;
  uint64_t backing_dev = 0, backing_ino = 0;  // the file it is bound to
};

// The loop devices this daemon attached, one empty file `loop<N>-<dev>-<ino>` each
// in `dir` (0700, under the daemon's state dir).
class LoopLedger {
 public:
  explicit LoopLedger(std::string dir) : dir_(std::move(dir)) {}
  Result<void> open();  // creates the dir
  Result<void> record(const LoopDevice& loop) const;
  void forget(int number, uint64_t dev, uint64_t ino) const;
  // For every entry: detaches the device if it is still bound to the recorded inode
  // (LOOP_GET_STATUS64 compares device and inode), then drops the entry. Returns how
  // many were still bound (and detached).
  Result<int> recover() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

// Binds `file_fd` to a free loop device (LOOP_CONFIGURE: autoclear, direct I/O, 4 KiB
// blocks) and records it in `ledger`. A device another process takes between
// LOOP_CTL_GET_FREE and LOOP_CONFIGURE answers EBUSY and is left alone.
Result<LoopDevice> attach_loop(int file_fd, bool read_only, const LoopLedger& ledger);
// True when loop device `number` is no longer bound to (dev, ino).
bool loop_released(int number, uint64_t dev, uint64_t ino);

struct Ext4Options {
  bool journal = false;  // volumes keep one; ephemeral writable layers do not need it
  uint32_t root_uid = 0, root_gid = 0;
};
// mkfs.ext4 of a new sparse image of `bytes` at `path` (4 KiB blocks, no reserved
// blocks, lazy inode tables).
Result<void> make_ext4_image(const std::string& path, uint64_t bytes, const Ext4Options& options);
// A new unlinked file in `dir` holding a sparse copy of `image` (only its data extents
// are copied: an empty 1 GiB image is well under 1 MiB of them).
Result<UniqueFd> clone_image_unlinked(int image_fd, const std::string& dir);
// The ext4 filesystem on `loop` as a detached mount (MOUNT_ATTR_* in `attrs`).
// `ephemeral`: a writable layer that dies with its session (its inode tables are never
// zeroed in the background).
Result<UniqueFd> mount_ext4(const LoopDevice& loop, bool read_only, uint64_t attrs, bool ephemeral = false);

// Bytes in use on the filesystem holding `fd` (blocks minus free blocks).
Result<uint64_t> fs_used_bytes(int fd);
// Bytes written to loop device `number` since it was bound (/sys/block/loopN/stat).
Result<uint64_t> loop_written_bytes(int number);

}  // namespace cela::jail
