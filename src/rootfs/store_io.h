// File helpers shared by the template store and the template builders: exact modes
// and owners regardless of umask, atomic replacement, a per-template build lock and
// a streaming sha256. Internal to src/rootfs.
#pragma once

#include "common/sha256.h"
#include "common/time.h"

#include <sys/types.h>

#include <string>
#include <string_view>

#include "common/error.h"
#include "common/fd.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace cela::rootfs {

using cela::Sha256;  // common/sha256.h
using cela::sha256_hex;


// Creates (or replaces) `path` with `data`, then sets exactly `mode` and uid:gid.
Result<void> write_file_exact(const std::string& path, std::string_view data, mode_t mode,
                              uid_t uid = 0, gid_t gid = 0);
// Writes `<path>.tmp-XXXXXX`, fsyncs it and renames it over `path`.
Result<void> write_file_atomic(const std::string& path, std::string_view data, mode_t mode);
// mkdir (an existing directory is fine), then sets exactly `mode` and uid:gid.
Result<void> make_dir_exact(const std::string& path, mode_t mode, uid_t uid = 0, gid_t gid = 0);
// Removes a tree without following symlinks; an absent path is fine.
Result<void> remove_tree(const std::string& path);

// Exclusive flock(2) on <store>/<name>/.lock for as long as it lives.
class BuildLock {
 public:
  static Result<BuildLock> acquire(const std::string& template_dir);

 private:
  explicit BuildLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};



}  // namespace cela::rootfs
