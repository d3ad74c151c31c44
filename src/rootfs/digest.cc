// layer_digest: a content hash of a template layer that changes whenever anything a
// sandbox could observe changes (bytes, modes, owners, links), and nothing else.
//
// One record per entry, depth first, each directory's entries sorted by name bytes:
//   "<type> <mode octal> <uid> <gid> <size> <relative path>\0" then the payload:
//   regular file: its `size` bytes; symlink: its target (`size` bytes); device: size
//   is the device number and there is no payload. Directory sizes are left out
//   (0): they depend on the filesystem's history, not on the tree. Times are left out.
// The walk uses openat/fstatat relative to directory fds and never follows a symlink.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "rootfs/store_io.h"
#include "rootfs/template.h"

namespace cela::rootfs {

namespace {

char type_char(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return 'f';
    case S_IFDIR:
      return 'd';
    case S_IFLNK:
      return 'l';
    case S_IFCHR:
      return 'c';
    case S_IFBLK:
      return 'b';
    case S_IFIFO:
      return 'p';
    case S_IFSOCK:
      return 's';
  }
  return '?';
}

class TreeHasher {
 public:
  Result<void> entry(int parent_fd, const char* name, const std::string& rel,
                     const std::string& abs) {
    struct stat st {};
    if (::fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return sys_fail("stat " + abs);
    uint64_t size = 0;
    std::string payload;
    switch (st.st_mode & S_IFMT) {
      case S_IFREG:
        size = static_cast<uint64_t>(st.st_size);
        break;
      case S_IFLNK: {
        auto target = read_link(parent_fd, name, abs);
        if (!target) return std::unexpected(target.error());
        payload = std::move(*target);
        size = payload.size();
        break;
      }
      case S_IFCHR:
      case S_IFBLK:
        size = st.st_rdev;
        break;
      default:
        break;
    }
    char head[128];
    int n = std::snprintf(head, sizeof head, "%c %o %u %u %llu ", type_char(st.st_mode),
                          static_cast<unsigned>(st.st_mode & 07777), st.st_uid, st.st_gid,
                          static_cast<unsigned long long>(size));
    hash_.update(std::string_view(head, static_cast<size_t>(n)));
    hash_.update(rel);
    hash_.update(std::string_view("\0", 1));
    hash_.update(payload);

    if (S_ISREG(st.st_mode)) return file_content(parent_fd, name, abs, size);
    if (S_ISDIR(st.st_mode)) return directory(parent_fd, name, rel, abs);
    return {};
  }

  std::string finish() { return "sha256:" + hash_.hex_final(); }

 private:
  static Result<std::string> read_link(int parent_fd, const char* name, const std::string& abs) {
    std::string target(256, '\0');
    for (;;) {
      ssize_t n = ::readlinkat(parent_fd, name, target.data(), target.size());
      if (n < 0) return sys_fail("readlink " + abs);
      if (static_cast<size_t>(n) < target.size()) {
        target.resize(static_cast<size_t>(n));
        return target;
      }
      target.resize(target.size() * 2);
    }
  }

  Result<void> file_content(int parent_fd, const char* name, const std::string& abs,
                            uint64_t size) {
    UniqueFd fd(::openat(parent_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return sys_fail("open " + abs);
    uint64_t total = 0;
    for (;;) {
      ssize_t n = ::read(fd.get(), buf_.data(), buf_.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return sys_fail("read " + abs);
      }
      if (n == 0) break;
      total += static_cast<uint64_t>(n);
      // The record announced `size` bytes; more would make the framing ambiguous.
      if (total > size) break;
      hash_.update(std::string_view(buf_.data(), static_cast<size_t>(n)));
    }
    if (total != size) return fail(ErrorCode::internal, "file changed while hashing: " + abs);
    return {};
  }

  Result<void> directory(int parent_fd, const char* name, const std::string& rel,
                         const std::string& abs) {
    int raw = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (raw < 0) return sys_fail("open " + abs);
    DIR* dir = ::fdopendir(raw);
    if (dir == nullptr) {
      ::close(raw);
      return sys_fail("fdopendir " + abs);
    }
    std::vector<std::string> names;
    errno = 0;
    while (const dirent* e = ::readdir(dir)) {
      std::string_view n(e->d_name);
      if (n != "." && n != "..") names.emplace_back(n);
    }
    int read_errno = errno;
    if (read_errno != 0) {
      ::closedir(dir);
      return sys_fail("readdir " + abs, read_errno);
    }
    std::sort(names.begin(), names.end());
    Result<void> result;
    for (const auto& child : names) {
      std::string child_rel = rel == "." ? child : rel + "/" + child;
      result = entry(::dirfd(dir), child.c_str(), child_rel, abs + "/" + child);
      if (!result) break;
    }
    ::closedir(dir);
    return result;
  }

  Sha256 hash_;
  std::vector<char> buf_ = std::vector<char>(1 << 16);
};

}  // namespace

Result<std::string> layer_digest(const std::string& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return sys_fail("stat " + dir);
  if (!S_ISDIR(st.st_mode)) return fail(ErrorCode::invalid_argument, "not a directory: " + dir);
  TreeHasher hasher;
  // The root itself is an entry too: its mode and owner are what `/` shows.
  if (auto r = hasher.entry(AT_FDCWD, dir.c_str(), ".", dir); !r) return std::unexpected(r.error());
  return hasher.finish();
}

}  // namespace cela::rootfs
