// Building blocks of SessionFs: see fs_internal.h.
#include "session/fs_internal.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <new>

namespace cela::session::fs_detail {

ErrorCode code_for_errno(int err) {
  switch (err) {
    case ENOENT:
      return ErrorCode::not_found;
    case EACCES:
    case EPERM:
    case EROFS:
    case EXDEV:  // RESOLVE_NO_XDEV: the path crosses a mount point
      return ErrorCode::permission_denied;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
      return ErrorCode::limit;
    case ENOTDIR:
    case EISDIR:
    case EEXIST:
    case ENOTEMPTY:
    case ELOOP:  // RESOLVE_NO_SYMLINKS / O_NOFOLLOW met a symlink, or a symlink loop
    case ENAMETOOLONG:
    case EINVAL:
    case EBUSY:  // a mount point
    case EMLINK:
      return ErrorCode::invalid_argument;
    default:
      return ErrorCode::system;
  }
}

std::unexpected<Error> fs_fail(std::string context, int err) {
  return std::unexpected(Error{code_for_errno(err), err, std::move(context)});
}

Result<void> check_path(std::string_view path) {
  if (path.empty() || path.front() != '/')
    return fail(ErrorCode::invalid_argument, "path must be absolute: '" + std::string(path) + "'");
  if (path.size() > kMaxPathBytes)
    return fail(ErrorCode::invalid_argument, "path longer than 4096 bytes");
  if (path.find('\0') != std::string_view::npos)
    return fail(ErrorCode::invalid_argument, "path holds a NUL byte");
  return {};
}

Error with_prefix(Error error, std::string_view prefix) {
  error.context.insert(0, prefix);
  return error;
}

Result<UniqueFd> open_at(int dir_fd, const std::string& path, int flags, uint64_t resolve,
                         std::string_view what, mode_t mode) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) ? mode : 0;
  how.resolve = resolve;
  for (int attempt = 0;; ++attempt) {
    long fd = ::syscall(SYS_openat2, dir_fd, path.c_str(), &how, sizeof how);
    if (fd >= 0) return UniqueFd(static_cast<int>(fd));
    if (errno == EAGAIN && attempt < 64) continue;
    return fs_fail(std::string(what), errno);
  }
}

Result<UniqueFd> reopen(int path_fd, int flags, std::string_view what) {
  char proc_path[64];
  std::snprintf(proc_path, sizeof proc_path, "/proc/self/fd/%d", path_fd);
  int fd = ::open(proc_path, flags | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return fs_fail(std::string(what));
  return UniqueFd(fd);
}

Result<struct stat> stat_fd(int fd, std::string_view what) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return fs_fail(std::string(what));
  return st;
}

Result<std::string> read_link_at(int dir_fd, const std::string& name, std::string_view what) {
  std::string target(256, '\0');
  for (;;) {
    ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
    if (n < 0) return fs_fail(std::string(what));
    if (static_cast<size_t>(n) < target.size()) {
      target.resize(static_cast<size_t>(n));
      return target;
    }
    if (target.size() > kMaxPathBytes * 4) return fs_fail(std::string(what), ENAMETOOLONG);
    target.resize(target.size() * 2);
  }
}

Result<UniqueFd> dup_fd(int fd, std::string_view what) {
  int copy = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return fs_fail(std::string(what));
  return UniqueFd(copy);
}

const char* type_name(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "file";
    case S_IFDIR:
      return "dir";
    case S_IFLNK:
      return "symlink";
  }
  return "other";
}

int64_t mtime_ms(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1000000;
}

std::string temp_name() {
  unsigned char bytes[8] = {};
  // getrandom of 8 bytes from the urandom pool does not block once the pool is
  // initialised; a short read only makes the O_EXCL retry more likely.
  (void)::getrandom(bytes, sizeof bytes, 0);
  std::string name = ".cela-";
  static constexpr char kHex[] = "0123456789abcdef";
  for (unsigned char b : bytes) {
    name += kHex[b >> 4];
    name += kHex[b & 15];
  }
  return name + ".tmp";
}

Result<void> write_all(int fd, std::string_view data, std::string_view what) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return fs_fail(std::string(what));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

Result<DirStream> DirStream::open(int dir_fd, std::string_view what) {
  auto copy = dup_fd(dir_fd, what);
  if (!copy) return std::unexpected(copy.error());
  DIR* dir = ::fdopendir(copy->get());
  if (dir == nullptr) return fs_fail(std::string(what));
  copy->release();  // the DIR owns it now
  // The duplicate shares the file offset: start from the beginning whatever was read.
  ::rewinddir(dir);
  return DirStream(dir);
}

DirStream::~DirStream() {
  if (dir_ != nullptr) ::closedir(dir_);
}

Result<bool> DirStream::read(std::vector<std::string>& names, size_t max, std::string_view what) {
  for (size_t count = 0; count < max;) {
    errno = 0;
    const dirent* entry = ::readdir(dir_);
    if (entry == nullptr) {
      if (errno != 0) return fs_fail(std::string(what));
      return false;
    }
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    names.emplace_back(name);
    ++count;
  }
  return true;
}

void DirStream::rewind() {
  ::rewinddir(dir_);
}


}  // namespace cela::session::fs_detail
