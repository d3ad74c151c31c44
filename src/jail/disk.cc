#include "jail/disk.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <linux/mount.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include "agent/mount_api.h"
#include "common/fs.h"

extern char** environ;

namespace cela::jail {
using agent::sys_fsconfig;
using agent::sys_fsmount;
using agent::sys_fsopen;
namespace {

constexpr const char* kMkfs = "/usr/sbin/mkfs.ext4";

std::string entry_name(int number, uint64_t dev, uint64_t ino) {
  return "loop" + std::to_string(number) + "-" + std::to_string(dev) + "-" + std::to_string(ino);
}

Result<void> run_quietly(std::vector<std::string> args) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  char* envp[] = {const_cast<char*>("PATH=/usr/sbin:/usr/bin:/sbin:/bin"), const_cast<char*>("LC_ALL=C"), nullptr};
  int rc = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return sys_fail(std::string("start ") + argv[0], rc);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return sys_fail("wait for " + args[0]);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(ErrorCode::system, args[0] + " failed (wait status " + std::to_string(status) + ")");
  return {};
}

}  // namespace

Result<void> LoopLedger::open() { return make_dirs(dir_, 0700); }

Result<void> LoopLedger::record(const LoopDevice& loop) const {
  std::string path = dir_ + "/" + entry_name(loop.number, loop.backing_dev, loop.backing_ino);
  UniqueFd fd(::open(path.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
  if (!fd) return sys_fail("record loop device in " + path);
  return {};
}

void LoopLedger::forget(int number, uint64_t dev, uint64_t ino) const {
  (void)::unlink((dir_ + "/" + entry_name(number, dev, ino)).c_str());
}

Result<int> LoopLedger::recover() const {
  DIR* d = ::opendir(dir_.c_str());
  if (!d) {
    if (errno == ENOENT) return 0;
    return sys_fail("open " + dir_);
  }
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d))
    if (std::strncmp(e->d_name, "loop", 4) == 0) names.emplace_back(e->d_name);
  ::closedir(d);
  int detached = 0;
  for (const std::string& name : names) {
    int number = -1;
    unsigned long long dev = 0, ino = 0;
    if (std::sscanf(name.c_str(), "loop%d-%llu-%llu", &number, &dev, &ino) == 3 && !loop_released(number, dev, ino)) {
      std::string path = "/dev/loop" + std::to_string(number);
      UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
      // Still ours (checked just above by inode): detach. A device that is still
      // mounted (held by a live process of ours, never after a restart) answers EBUSY;
      // autoclear then frees it at the last close.
      if (fd && ::ioctl(fd.get(), LOOP_CLR_FD, 0) == 0) ++detached;
    }
    (void)::unlink((dir_ + "/" + name).c_str());
  }
  return detached;
}

bool loop_released(int number, uint64_t dev, uint64_t ino) {
  std::string path = "/dev/loop" + std::to_string(number);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return true;
  loop_info64 info{};
  if (::ioctl(fd.get(), LOOP_GET_STATUS64, &info) != 0) return true;  // ENXIO: unbound
  return info.lo_device != dev || info.lo_inode != ino;
}

Result<LoopDevice> attach_loop(int file_fd, bool read_only, const LoopLedger& ledger) {
  struct stat st {};
  if (::fstat(file_fd, &st) != 0) return sys_fail("stat disk image");
  UniqueFd control(::open("/dev/loop-control", O_RDWR | O_CLOEXEC));
  if (!control) return sys_fail("open /dev/loop-control");
  for (int attempt = 0; attempt < 64; ++attempt) {
    int number = ::ioctl(control.get(), LOOP_CTL_GET_FREE);
    if (number < 0) return sys_fail("find a free loop device");
    std::string path = "/dev/loop" + std::to_string(number);
    UniqueFd fd(::open(path.c_str(), (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT || errno == ENXIO) continue;  // raced with a removal
      return sys_fail("open " + path);
    }
    LoopDevice loop;
    loop.number = number;
    loop.backing_dev = static_cast<uint64_t>(st.st_dev);
    loop.backing_ino = static_cast<uint64_t>(st.st_ino);
    // Recorded before it is bound: a crash between the two leaves an entry that
    // recovery finds unbound, never a bound device without an entry.
    if (auto r = ledger.record(loop); !r) return std::unexpected(r.error());
    loop_config config{};
    config.fd = static_cast<uint32_t>(file_fd);
    config.block_size = 4096;
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO | (read_only ? LO_FLAGS_READ_ONLY : 0);
    if (::ioctl(fd.get(), LOOP_CONFIGURE, &config) == 0) {
      loop.fd = std::move(fd);
      return loop;
    }
    int err = errno;
    ledger.forget(number, loop.backing_dev, loop.backing_ino);
    if (err != EBUSY) return sys_fail("bind " + path, err);
    // Someone else took it first: theirs, untouched; try the next free one.
  }
  return fail(ErrorCode::capacity_exceeded, "no free loop device (every candidate was taken meanwhile)");
}

Result<void> make_ext4_image(const std::string& path, uint64_t bytes, const Ext4Options& options) {
  {
    UniqueFd fd(::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
    if (!fd) return sys_fail("create " + path);
    if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) return sys_fail("size " + path);
  }
  std::string ext = "lazy_itable_init=1,nodiscard,root_owner=" + std::to_string(options.root_uid) + ":" +
                    std::to_string(options.root_gid);
  if (options.journal) ext += ",lazy_journal_init=1";
  std::vector<std::string> args{kMkfs, "-q", "-F", "-b", "4096", "-m", "0", "-E", ext};
  if (!options.journal) args.insert(args.end(), {"-O", "^has_journal"});
  args.push_back(path);
  if (auto r = run_quietly(std::move(args)); !r) {
    (void)::unlink(path.c_str());
    return r;
  }
  return {};
}

Result<UniqueFd> clone_image_unlinked(int image_fd, const std::string& dir) {
  struct stat st {};
  if (::fstat(image_fd, &st) != 0) return sys_fail("stat empty image");
  UniqueFd out(::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
  if (!out) return sys_fail("create an unlinked image in " + dir);
  if (::ftruncate(out.get(), st.st_size) != 0) return sys_fail("size the image");
  off_t pos = 0;
  for (;;) {
    off_t data = ::lseek(image_fd, pos, SEEK_DATA);
    if (data < 0) {
      if (errno == ENXIO) break;  // no data past pos
      return sys_fail("seek image data");
    }
    off_t hole = ::lseek(image_fd, data, SEEK_HOLE);
    if (hole < 0) return sys_fail("seek image hole");
    loff_t in = data, to = data;
    while (in < hole) {
      ssize_t n = ::copy_file_range(image_fd, &in, out.get(), &to, static_cast<size_t>(hole - in), 0);
      if (n < 0) return sys_fail("copy image");
      if (n == 0) break;
    }
    pos = hole;
  }
  return out;
}

Result<UniqueFd> mount_ext4(const LoopDevice& loop, bool read_only, uint64_t attrs, bool ephemeral) {
  UniqueFd fs(sys_fsopen("ext4", FSOPEN_CLOEXEC));
  if (!fs) return sys_fail("fsopen ext4");
  std::string source = "/dev/loop" + std::to_string(loop.number);
  if (sys_fsconfig(fs.get(), FSCONFIG_SET_STRING, "source", source.c_str(), 0) != 0)
    return sys_fail("ext4 source " + source);
  // The inode tables of a lazily made filesystem are zeroed by a kernel thread after
  // the mount (16 MiB per GiB, written while the session runs and counted as its
  // writes). A layer that lives as long as its session never needs them zeroed: the
  // group descriptors already say which inodes are unused.
  if (ephemeral && sys_fsconfig(fs.get(), FSCONFIG_SET_FLAG, "noinit_itable", nullptr, 0) != 0)
    return sys_fail("ext4 noinit_itable");
  if (read_only && sys_fsconfig(fs.get(), FSCONFIG_SET_FLAG, "ro", nullptr, 0) != 0) return sys_fail("ext4 ro");
  if (sys_fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) return sys_fail("mount ext4 " + source);
  UniqueFd mnt(sys_fsmount(fs.get(), FSMOUNT_CLOEXEC, static_cast<unsigned>(attrs)));
  if (!mnt) return sys_fail("fsmount ext4 " + source);
  return mnt;
}

Result<uint64_t> fs_used_bytes(int fd) {
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0) return sys_fail("statfs");
  return static_cast<uint64_t>(fs.f_blocks - fs.f_bfree) * static_cast<uint64_t>(fs.f_bsize);
}

Result<uint64_t> loop_written_bytes(int number) {
  // Fields: read I/Os, merges, sectors, ticks, write I/Os, merges, sectors (512 B), ...
  auto text = read_file("/sys/block/loop" + std::to_string(number) + "/stat");
  if (!text) return std::unexpected(text.error());
  std::istringstream in(*text);
  uint64_t field[7] = {};
  for (auto& f : field)
    if (!(in >> f)) return fail(ErrorCode::internal, "unexpected /sys/block/loop" + std::to_string(number) + "/stat");
  return field[6] * 512;
}

}  // namespace cela::jail
