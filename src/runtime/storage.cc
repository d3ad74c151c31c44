#include "runtime/storage.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "common/fs.h"

namespace cela::runtime {

std::string_view to_string(DiskKind kind) { return kind == DiskKind::disk ? "disk" : "memory"; }

std::optional<DiskKind> disk_kind(std::string_view name) {
  if (name == "disk") return DiskKind::disk;
  if (name == "memory") return DiskKind::memory;
  return std::nullopt;
}

// ---- DiskMeter

DiskUsage DiskMeter::read_locked() const {
  DiskUsage u;
  if (auto used = jail::fs_used_bytes(root_.get()); used) u.used_bytes = *used > base_used_ ? *used - base_used_ : 0;
  if (loop_ >= 0)
    if (auto written = jail::loop_written_bytes(loop_); written)
      u.written_bytes = *written > base_written_ ? *written - base_written_ : 0;
  return u;
}

DiskUsage DiskMeter::usage() const {
  std::lock_guard lock(mu_);
  if (last_) return *last_;
  return read_locked();
}

void DiskMeter::close() {
  std::lock_guard lock(mu_);
  if (last_) return;
  last_ = read_locked();
  root_.reset();
}

// ---- Disk

Disk::Disk(UniqueFd file, jail::LoopDevice loop, UniqueFd mount, uint64_t bytes, uint64_t base_used,
           uint64_t base_written)
    : file_(std::move(file)), loop_(std::move(loop)), mount_(std::move(mount)), bytes_(bytes) {
  UniqueFd meter_fd(::fcntl(mount_.get(), F_DUPFD_CLOEXEC, 3));
  meter_ = std::make_shared<DiskMeter>(std::move(meter_fd), loop_.number, base_used, base_written);
}

Disk::~Disk() { release(); }

Disk::Released Disk::release() {
  if (released_) return *released_;
  Released r;
  meter_->close();
  // (EXT4_IOC_SHUTDOWN first, to drop dirty pages, was measured slower: 62 ms against
  // 31 ms for a small layer, the unmount of a shut-down filesystem waits longer.)
  mount_.reset();
  // The last reference to the superblock goes with the mount: the kernel unmounts it
  // (task work, before close returns) and releases the device; autoclear unbinds it.
  loop_.fd.reset();
  file_.reset();  // unlinked since it was made: its blocks are freed with the binding
  r.image_removed = true;
  // The device is unbound once nothing holds the filesystem: a descriptor of the layer
  // still open on another thread (the audit's files-written walk, a snapshot copy) keeps
  // it until that thread closes it. Wait a little for that rather than report (and
  // ledger) a device that is about to go.
  r.loop_detached = jail::loop_released(loop_.number, loop_.backing_dev, loop_.backing_ino);
  for (int ms = 1; !r.loop_detached && ms <= 512; ms *= 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    r.loop_detached = jail::loop_released(loop_.number, loop_.backing_dev, loop_.backing_ino);
  }
  if (r.loop_detached && ledger_) ledger_->forget(loop_.number, loop_.backing_dev, loop_.backing_ino);
  released_ = r;
  return r;
}

// ---- DiskPool

Result<std::unique_ptr<DiskPool>> DiskPool::open(const DiskPoolOptions& options) {
  std::unique_ptr<DiskPool> pool(new DiskPool(options));
  if (options.dir.empty()) return pool;  // no disk layers (cela run): take() refuses
  if (auto r = make_dirs(options.dir, 0700); !r) return std::unexpected(r.error());
  if (auto r = pool->ledger_.open(); !r) return std::unexpected(r.error());
  // Loop devices first (a bound one could still reference a file below).
  auto loops = pool->ledger_.recover();
  if (!loops) return std::unexpected(loops.error());
  pool->recovered_loops_ = *loops;
  // Images are never linked, except an empty one while mkfs writes it: whatever file
  // is left here is a crash's, and this directory is the daemon's alone.
  if (DIR* d = ::opendir(options.dir.c_str())) {
    std::vector<std::string> stale;
    while (dirent* e = ::readdir(d))
      if (e->d_type == DT_REG) stale.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto& name : stale)
      if (::unlink((options.dir + "/" + name).c_str()) == 0) ++pool->recovered_files_;
  }
  if (pool->options_.ready > 0) pool->thread_ = std::thread([p = pool.get()] { p->refill(); });
  return pool;
}

DiskPool::~DiskPool() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  ready_.clear();
}

Result<int> DiskPool::empty_image(uint64_t bytes) {
  std::lock_guard lock(images_mu_);
  if (auto it = empty_.find(bytes); it != empty_.end()) return it->second.get();
  // Named only while mkfs writes it (mkfs takes a path), unlinked right after; a crash
  // in between leaves a file that open() removes.
  std::string path = options_.dir + "/empty-" + std::to_string(bytes) + "-" + std::to_string(::getpid()) + ".img";
  (void)::unlink(path.c_str());
  if (auto r = jail::make_ext4_image(path, bytes, {}); !r) return std::unexpected(r.error());
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  int err = errno;
  (void)::unlink(path.c_str());
  if (!fd) return sys_fail("open " + path, err);
  int raw = fd.get();
  empty_[bytes] = std::move(fd);
  return raw;
}

Result<std::unique_ptr<Disk>> DiskPool::make(uint64_t bytes) {
  if (options_.dir.empty()) return fail(ErrorCode::invalid_argument, "no directory for disk-backed layers configured");
  auto empty = empty_image(bytes);
  if (!empty) return std::unexpected(empty.error());
  auto file = jail::clone_image_unlinked(*empty, options_.dir);
  if (!file) return std::unexpected(file.error());
  auto loop = jail::attach_loop(file->get(), false, ledger_);
  if (!loop) return std::unexpected(loop.error());
  auto forget = [&] { ledger_.forget(loop->number, loop->backing_dev, loop->backing_ino); };
  auto mount = jail::mount_ext4(*loop, false, MOUNT_ATTR_NODEV, true);
  if (!mount) {
    loop->fd.reset();  // autoclear: unbound at this last close
    forget();
    return std::unexpected(mount.error());
  }
  for (const char* dir : {"upper", "work"}) {
    if (::mkdirat(mount->get(), dir, 0755) != 0) {
      auto e = sys_fail(std::string("mkdir ") + dir + " on the writable layer");
      mount->reset();
      loop->fd.reset();
      forget();
      return e;
    }
  }
  uint64_t base_used = jail::fs_used_bytes(mount->get()).value_or(0);
  uint64_t base_written = jail::loop_written_bytes(loop->number).value_or(0);
  auto disk = std::make_unique<Disk>(std::move(*file), std::move(*loop), std::move(*mount), bytes, base_used,
                                     base_written);
  disk->ledger_ = &ledger_;
  return disk;
}

Result<std::unique_ptr<Disk>> DiskPool::take(uint64_t bytes) {
  {
    std::lock_guard lock(mu_);
    for (auto it = ready_.begin(); it != ready_.end(); ++it) {
      if ((*it)->bytes() != bytes) continue;
      auto disk = std::move(*it);
      ready_.erase(it);
      ++hits_;
      wake_.notify_all();
      return disk;
    }
    ++misses_;
  }
  wake_.notify_all();
  return make(bytes);
}

DiskPoolStats DiskPool::stats() const {
  std::lock_guard lock(mu_);
  return {hits_, misses_, ready_.size()};
}

void DiskPool::refill() {
  std::unique_lock lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || ready_.size() < options_.ready; });
    if (stopping_) return;
    lock.unlock();
    auto disk = make(options_.ready_bytes);
    lock.lock();
    if (!disk) {
      std::fprintf(stderr, "cela: disk pool: %s\n", disk.error().message().c_str());
      // Try again later rather than spin on a host that cannot make one now.
      wake_.wait_for(lock, std::chrono::seconds(5), [&] { return stopping_; });
      continue;
    }
    ready_.push_back(std::move(*disk));
  }
}

// ---- Volumes

MountedVolume::~MountedVolume() {
  mount_.reset();  // the kernel unmounts (journal and data written back) ...
  int number = loop_.number;
  uint64_t dev = loop_.backing_dev, ino = loop_.backing_ino;
  loop_.fd.reset();  // ... and autoclear unbinds the device
  file_.reset();
  if (jail::loop_released(number, dev, ino)) ledger_.forget(number, dev, ino);
}

VolumeUse::~VolumeUse() { owner_.released(image_, writer_, std::move(mounted_)); }

Result<std::shared_ptr<VolumeUse>> VolumeMounts::acquire(const std::string& image, bool writer) {
  std::lock_guard lock(mu_);
  Entry& entry = entries_[image];
  if (writer && entry.writer) return fail(ErrorCode::conflict, "the volume already has a writer");
  std::shared_ptr<MountedVolume> mounted = entry.mounted.lock();
  if (!mounted) {
    UniqueFd file(::open(image.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
    if (!file) return sys_fail("open volume image " + image);
    auto loop = jail::attach_loop(file.get(), false, ledger_);
    if (!loop) return std::unexpected(loop.error());
    auto mount = jail::mount_ext4(*loop, false, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID);
    if (!mount) {
      int n = loop->number;
      uint64_t dev = loop->backing_dev, ino = loop->backing_ino;
      loop->fd.reset();
      ledger_.forget(n, dev, ino);
      if (entries_[image].mounted.expired() && !entries_[image].writer) entries_.erase(image);
      return std::unexpected(mount.error());
    }
    mounted = std::make_shared<MountedVolume>(std::move(file), std::move(*loop), std::move(*mount), ledger_);
    entry.mounted = mounted;
  }
  if (writer) entry.writer = true;
  return std::make_shared<VolumeUse>(*this, image, writer, std::move(mounted));
}

bool VolumeMounts::in_use(const std::string& image) const {
  std::lock_guard lock(mu_);
  auto it = entries_.find(image);
  return it != entries_.end() && !it->second.mounted.expired();
}

void VolumeMounts::released(const std::string& image, bool writer, std::shared_ptr<MountedVolume> mounted) {
  // Under the lock: the last use's unmount completes before anyone can mount the same
  // image again (two mounts of one ext4 image would corrupt it).
  std::lock_guard lock(mu_);
  mounted.reset();
  auto it = entries_.find(image);
  if (it == entries_.end()) return;
  if (writer) it->second.writer = false;
  if (it->second.mounted.expired() && !it->second.writer) entries_.erase(it);
}

Result<void> make_volume_image(const std::string& path, uint64_t bytes, uint32_t uid, uint32_t gid) {
  return jail::make_ext4_image(path, bytes, {.journal = true, .root_uid = uid, .root_gid = gid});
}

}  // namespace cela::runtime
