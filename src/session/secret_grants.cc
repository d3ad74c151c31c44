#include "session/secret_grants.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cela::session {
namespace {

// /run/secrets inside the sandbox, resolved in its root (its mounts are crossed: the
// tmpfs is one), and checked to be a tmpfs other than the root's filesystem.
Result<UniqueFd> open_secrets_dir(int root_fd) {
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  int fd = static_cast<int>(::syscall(SYS_openat2, root_fd, "run/secrets", &how, sizeof how));
  if (fd < 0) return sys_fail("open /run/secrets in the sandbox");
  UniqueFd dir(fd);
  struct statfs fs {};
  struct stat st {}, root_st {};
  if (::fstatfs(dir.get(), &fs) != 0 || ::fstat(dir.get(), &st) != 0 || ::fstat(root_fd, &root_st) != 0)
    return sys_fail("stat /run/secrets in the sandbox");
  if (static_cast<unsigned long>(fs.f_type) != TMPFS_MAGIC || st.st_dev == root_st.st_dev)
    return fail(ErrorCode::internal, "/run/secrets in the sandbox is not its own tmpfs");
  // An O_PATH fd cannot be used for openat of a new file: reopen as a directory.
  int rd = ::openat(dir.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rd < 0) return sys_fail("open /run/secrets in the sandbox");
  return UniqueFd(rd);
}

std::string file_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// The tmpfs belongs to the sandbox's user namespace: the kernel creates an inode there
// only for a mapped fsuid/fsgid (host root is not: EOVERFLOW). So this thread creates
// the file with the sandbox user's host ids as its fsuid/fsgid (per thread), with its
// filesystem capabilities raised again (setfsuid drops them from the effective set),
// and goes back to root's on every path.
class AsFsUser {
 public:
  AsFsUser(uid_t uid, gid_t gid) {
    ::setfsgid(gid);
    ::setfsuid(uid);
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[2]{};
    if (::syscall(SYS_capget, &h, d) == 0) {
      d[0].effective = d[0].permitted;
      d[1].effective = d[1].permitted;
      (void)::syscall(SYS_capset, &h, d);
    }
  }
  ~AsFsUser() {
    ::setfsuid(0);  // restores the filesystem capabilities
    ::setfsgid(0);
  }
  AsFsUser(const AsFsUser&) = delete;
  AsFsUser& operator=(const AsFsUser&) = delete;
};

}  // namespace

Result<void> install_secret_file(int root_fd, const std::string& path, std::string_view value, uid_t uid,
                                 gid_t gid) {
  auto dir = open_secrets_dir(root_fd);
  if (!dir) return std::unexpected(dir.error());
  std::string name = file_of(path);
  int fd = -1;
  {
    AsFsUser as(uid, gid);
    fd = ::openat(dir->get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
  }
  if (fd < 0) return sys_fail("create " + path + " in the sandbox");
  UniqueFd file(fd);
  size_t done = 0;
  while (done < value.size()) {
    ssize_t n = ::write(file.get(), value.data() + done, value.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      (void)::unlinkat(dir->get(), name.c_str(), 0);
      return sys_fail("write " + path + " in the sandbox");
    }
    done += static_cast<size_t>(n);
  }
  if (::fchown(file.get(), uid, gid) != 0 || ::fchmod(file.get(), 0400) != 0) {
    (void)::unlinkat(dir->get(), name.c_str(), 0);
    return sys_fail("chown " + path + " in the sandbox");
  }
  return {};
}

bool wipe_secret_file(int root_fd, const std::string& path) {
  auto dir = open_secrets_dir(root_fd);
  if (!dir) return false;
  std::string name = file_of(path);
  int fd = ::openat(dir->get(), name.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
      std::string zeros(static_cast<size_t>(std::min<off_t>(st.st_size, 1 << 20)), '\0');
      (void)::pwrite(fd, zeros.data(), zeros.size(), 0);
    }
    ::close(fd);
  }
  return ::unlinkat(dir->get(), name.c_str(), 0) == 0;
}

Error redact_error(const obs::Redactions* r, Error e) {
  if (r && !r->empty()) e.context = r->redact(e.context);
  return e;
}

}  // namespace cela::session
