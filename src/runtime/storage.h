// Storage of sandboxes: disk-backed writable layers from a pool of ready ext4 images,
// their meters, and volumes mounted once and shared by the sandboxes that use them
// (the kernel side is jail/disk.h).
//
// Threads: DiskPool and VolumeMounts are safe from any thread (their own mutex); the
// pool refills on a thread of its own, so neither mkfs, nor the copy of an image, nor
// the loop device and mount ever run on the session reactor. DiskMeter reads from any
// thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "common/error.h"
#include "common/fd.h"
#include "jail/disk.h"

namespace cela::runtime {

// Where a sandbox's writable layer lives: `disk`, an ext4 image of its own (the limit
// is ENOSPC, the pages are page cache the kernel can write back and reclaim), or
// `memory`, a tmpfs (RAM counted against the memory limit; the fastest to create).
enum class DiskKind { disk, memory };
std::string_view to_string(DiskKind kind);
std::optional<DiskKind> disk_kind(std::string_view name);

struct DiskUsage {
  uint64_t used_bytes = 0;                    // in the writable layer, beyond an empty one
  std::optional<uint64_t> written_bytes;      // to its image since create (unset: tmpfs has no counter)
};

// Reads one sandbox's writable layer from any thread. close() (at teardown) keeps the
// last reading and drops the descriptors, so a meter held elsewhere never keeps a
// layer alive.
class DiskMeter {
 public:
  // `root` is any fd on the writable layer's filesystem; `loop` the image's loop
  // device (-1 for tmpfs); baselines are what an empty layer shows.
  DiskMeter(UniqueFd root, int loop, uint64_t base_used, uint64_t base_written)
      : root_(std::move(root)), loop_(loop), base_used_(base_used), base_written_(base_written) {}
  DiskUsage usage() const;
  void close();

 private:
  DiskUsage read_locked() const;
  mutable std::mutex mu_;
  UniqueFd root_;
  int loop_;
  uint64_t base_used_, base_written_;
  std::optional<DiskUsage> last_;
};

// A writable layer on its own ext4 image, for one sandbox: never reused.
class Disk {
 public:
  Disk(UniqueFd file, jail::LoopDevice loop, UniqueFd mount, uint64_t bytes, uint64_t base_used,
       uint64_t base_written);
  ~Disk();
  Disk(const Disk&) = delete;
  Disk& operator=(const Disk&) = delete;
  int root() const { return mount_.get(); }  // the filesystem's root, holding upper/ and work/
  uint64_t bytes() const { return bytes_; }
  int loop_number() const { return loop_.number; }
  std::shared_ptr<DiskMeter> meter() const { return meter_; }

  struct Released {
    bool image_removed = false;  // the image's last reference is gone (it was never linked)
    bool loop_detached = false;  // the loop device is no longer bound to it
  };
  // Closes every reference (the kernel unmounts the filesystem, autoclear unbinds the
  // loop device, the unlinked image's blocks are freed: 30-60 ms here, so not on the
  // reactor) and checks the loop device let go. Call after the sandbox's processes
  // are gone. Idempotent.
  Released release();

 private:
  friend class DiskPool;
  const jail::LoopLedger* ledger_ = nullptr;
  UniqueFd file_;
  jail::LoopDevice loop_;
  UniqueFd mount_;
  uint64_t bytes_;
  std::shared_ptr<DiskMeter> meter_;
  std::optional<Released> released_;
};

struct DiskPoolOptions {
  std::string dir;              // images (unlinked) and the loop ledger live here; "": no disk layers
  uint64_t ready_bytes = 1ull << 30;  // the size the pool keeps ready (the default disk_mb)
  size_t ready = 2;             // how many it keeps ready (0: none, every create makes its own)
};

struct DiskPoolStats {
  uint64_t hits = 0, misses = 0, ready = 0;
};

class DiskPool {
 public:
  // Recovers what a previous process left in `dir` (stale files, loop devices still
  // bound to an inode it recorded), then starts the refill thread.
  static Result<std::unique_ptr<DiskPool>> open(const DiskPoolOptions& options);
  ~DiskPool();
  // A ready layer of `bytes`: a pooled one when the size matches, else one made now on
  // the calling thread (call it off the reactor).
  Result<std::unique_ptr<Disk>> take(uint64_t bytes);
  DiskPoolStats stats() const;
  const jail::LoopLedger& ledger() const { return ledger_; }
  // How many stale loop devices and files the opening recovery found.
  int recovered_loops() const { return recovered_loops_; }
  int recovered_files() const { return recovered_files_; }

 private:
  explicit DiskPool(DiskPoolOptions options) : options_(std::move(options)), ledger_(options_.dir + "/loops") {}
  Result<std::unique_ptr<Disk>> make(uint64_t bytes);
  // The empty ext4 image of `bytes` every layer of that size is copied from (made once
  // with mkfs, kept as an unlinked file).
  Result<int> empty_image(uint64_t bytes);
  void refill();

  DiskPoolOptions options_;
  jail::LoopLedger ledger_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Disk>> ready_;
  std::map<uint64_t, UniqueFd> empty_;  // guarded by images_mu_
  std::mutex images_mu_;
  uint64_t hits_ = 0, misses_ = 0;
  bool stopping_ = false;
  int recovered_loops_ = 0, recovered_files_ = 0;
  std::thread thread_;
};

// A volume's filesystem, mounted once (detached) while any sandbox uses it.
class MountedVolume {
 public:
  MountedVolume(UniqueFd file, jail::LoopDevice loop, UniqueFd mount, const jail::LoopLedger& ledger)
      : file_(std::move(file)), loop_(std::move(loop)), mount_(std::move(mount)), ledger_(ledger) {}
  ~MountedVolume();
  int root() const { return mount_.get(); }

 private:
  UniqueFd file_;
  jail::LoopDevice loop_;
  UniqueFd mount_;
  const jail::LoopLedger& ledger_;
};

// One sandbox's use of a volume: keeps it mounted; a writer's use makes it the writer.
class VolumeUse;

// Volumes in use, by image path: mounted at the first use, unmounted (journal and
// data written back) after the last. At most one writer per volume.
class VolumeMounts {
 public:
  explicit VolumeMounts(const jail::LoopLedger& ledger) : ledger_(ledger) {}
  // conflict when `writer` and the volume already has one.
  Result<std::shared_ptr<VolumeUse>> acquire(const std::string& image, bool writer);
  bool in_use(const std::string& image) const;

 private:
  friend class VolumeUse;
  struct Entry {
    std::weak_ptr<MountedVolume> mounted;
    bool writer = false;
  };
  void released(const std::string& image, bool writer, std::shared_ptr<MountedVolume> mounted);
  const jail::LoopLedger& ledger_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

class VolumeUse {
 public:
  VolumeUse(VolumeMounts& owner, std::string image, bool writer, std::shared_ptr<MountedVolume> mounted)
      : owner_(owner), image_(std::move(image)), writer_(writer), mounted_(std::move(mounted)) {}
  ~VolumeUse();
  int root() const { return mounted_->root(); }
  bool writer() const { return writer_; }

 private:
  VolumeMounts& owner_;
  std::string image_;
  bool writer_;
  std::shared_ptr<MountedVolume> mounted_;
};

// A new volume image: ext4 with a journal, its root owned by `uid`:`gid` (ids as the
// sandbox sees them: volumes are mounted idmapped through each session's user
// namespace, so files keep their in-sandbox owner from one session to the next).
Result<void> make_volume_image(const std::string& path, uint64_t bytes, uint32_t uid, uint32_t gid);

}  // namespace cela::runtime
