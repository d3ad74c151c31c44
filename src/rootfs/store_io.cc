#include "rootfs/store_io.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <system_error>

namespace cela::rootfs {

namespace {

Result<void> write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_fail("write " + path);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

// fchmod after creation: open(2) and mkdir(2) modes are filtered by the umask.
Result<void> set_mode_owner(int fd, const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  if (::fchown(fd, uid, gid) != 0) return sys_fail("chown " + path);
  // chown clears setuid/setgid bits, so the mode goes second.
  if (::fchmod(fd, mode) != 0) return sys_fail("chmod " + path);
  return {};
}

}  // namespace

Result<void> write_file_exact(const std::string& path, std::string_view data, mode_t mode,
                              uid_t uid, gid_t gid) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_fail("create " + path);
  if (auto r = write_all(fd.get(), data, path); !r) return r;
  return set_mode_owner(fd.get(), path, mode, uid, gid);
}

Result<void> write_file_atomic(const std::string& path, std::string_view data, mode_t mode) {
  std::string tmp = path + ".tmp-XXXXXX";
  UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
  if (!fd) return sys_fail("create temp file for " + path);
  auto written = [&]() -> Result<void> {
    if (auto r = write_all(fd.get(), data, tmp); !r) return r;
    if (::fchmod(fd.get(), mode) != 0) return sys_fail("chmod " + tmp);
    if (::fsync(fd.get()) != 0) return sys_fail("fsync " + tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0) return sys_fail("rename " + tmp + " to " + path);
    return {};
  }();
  if (!written) ::unlink(tmp.c_str());
  return written;
}

Result<void> make_dir_exact(const std::string& path, mode_t mode, uid_t uid, gid_t gid) {
  if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return sys_fail("mkdir " + path);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_fail("open " + path);
  return set_mode_owner(fd.get(), path, mode, uid, gid);
}

Result<void> remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);  // removes symlinks, never their targets
  if (ec) return sys_fail("remove " + path, ec.value());
  return {};
}


Result<BuildLock> BuildLock::acquire(const std::string& template_dir) {
  std::string path = template_dir + "/.lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_fail("open " + path);
  while (::flock(fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return sys_fail("flock " + path);
  }
  return BuildLock(std::move(fd));
}



}  // namespace cela::rootfs
