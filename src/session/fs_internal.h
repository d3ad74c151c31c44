// Building blocks of SessionFs shared by its file operations (session_fs.cc) and its tar
// import/export (fs_tar.cc): openat2 resolution, errno-to-ErrorCode mapping, safe
// reopening, directory reading, temp names and a streaming sha256. Internal to
// src/session.
#pragma once

#include "common/sha256.h"

#include <dirent.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace cela::session::fs_detail {

using cela::Sha256;  // common/sha256.h
using cela::sha256_hex;


// A sandbox path from the sandbox root: ".." and absolute symlinks stay in the root,
// no magic links, no mount crossing (see session_fs.h).
inline constexpr uint64_t kInRoot = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
// One step of a tree walk: the name must be directly below the directory fd, and no
// symlink (not even the final component) or mount point is crossed.
inline constexpr uint64_t kBeneath =
    RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;

inline constexpr size_t kMaxPathBytes = 4096;

// The ErrorCode an errno from a file operation maps to (see session_fs.h "Errors").
ErrorCode code_for_errno(int err);
// A failed file syscall: the code from code_for_errno, the errno, the context.
std::unexpected<Error> fs_fail(std::string context, int err = errno);
// A sandbox path: starts with '/', at most kMaxPathBytes, no NUL (invalid_argument).
Result<void> check_path(std::string_view path);
// Prefixes an error's context ("tar entry 'a/b': " + context).
Error with_prefix(Error error, std::string_view prefix);

// openat2(dir_fd, path, flags | O_CLOEXEC, mode, resolve), retried on EAGAIN (the
// kernel asks for a retry when a rename or mount raced a ".." step).
Result<UniqueFd> open_at(int dir_fd, const std::string& path, int flags, uint64_t resolve,
                         std::string_view what, mode_t mode = 0);
// Opens the inode behind an O_PATH fd with `flags` through /proc/self/fd: the same
// inode the caller checked with fstat, so a file swapped in meanwhile is never opened.
Result<UniqueFd> reopen(int path_fd, int flags, std::string_view what);
Result<struct stat> stat_fd(int fd, std::string_view what);
Result<std::string> read_link_at(int dir_fd, const std::string& name, std::string_view what);
Result<UniqueFd> dup_fd(int fd, std::string_view what);

// "file", "dir", "symlink", "other".
const char* type_name(mode_t mode);
int64_t mtime_ms(const struct stat& st);

// A fresh ".cela-<16 hex>.tmp" name.
std::string temp_name();
Result<void> write_all(int fd, std::string_view data, std::string_view what);

// Reads the names in a directory (never "." or "..").
class DirStream {
 public:
  // `dir_fd` must be opened O_RDONLY|O_DIRECTORY; it is duplicated, not taken.
  static Result<DirStream> open(int dir_fd, std::string_view what);
  DirStream(DirStream&& other) noexcept : dir_(std::exchange(other.dir_, nullptr)) {}
  DirStream& operator=(DirStream&&) = delete;
  ~DirStream();

  // Appends up to `max` names to `names`; true when it stopped at `max` (names may
  // remain), false at the end of the directory.
  Result<bool> read(std::vector<std::string>& names, size_t max, std::string_view what);
  void rewind();

 private:
  explicit DirStream(DIR* dir) : dir_(dir) {}
  DIR* dir_;
};


}  // namespace cela::session::fs_detail
