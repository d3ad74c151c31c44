// BlobCache: the package gateway's content-addressed cache under the state dir
// (`packages.cache_dir`). Only the daemon writes it (sandboxes reach it only through
// the gateway's HTTP answers): bytes enter only once their sha256 is computed and
// checked by the caller, as a temp file renamed into blobs/sha256/<2 hex>/<64 hex>, so
// a reader never sees a partial blob. Upstream metadata (indexes, packuments, Debian
// index files), which offline mode serves, is kept by key under meta/.
//
// Thread-safe: every call works on whole files (create-then-rename).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"

namespace cela::net {

class BlobCache {
 public:
  // Creates dir/{blobs/sha256,meta,tmp} (mode 0700) and removes stale temp files.
  static Result<std::unique_ptr<BlobCache>> open(const std::string& dir);

  // The blob's path when the cache holds it.
  std::optional<std::string> find(std::string_view sha256) const;
  // A fresh temp path under the cache (same filesystem as the blobs).
  std::string temp_path();
  // Moves `temp` (whose sha256 the caller computed and verified) into the cache.
  Result<std::string> adopt(const std::string& temp, std::string_view sha256);

  // Upstream metadata by key ("pypi:requests", "debian:dists/bookworm/InRelease").
  std::optional<std::string> find_meta(std::string_view key) const;
  Result<void> put_meta(std::string_view key, const std::string& temp);
  // Small text pointers: key -> value (a Debian pool path -> its blob's sha256).
  std::optional<std::string> get_note(std::string_view key) const;
  Result<void> put_note(std::string_view key, std::string_view value);

  // Counted by the gateway as it serves files: from the cache, or fetched upstream.
  void count(bool hit) { (hit ? hits_ : misses_).fetch_add(1); }
  uint64_t hits() const { return hits_.load(); }
  uint64_t misses() const { return misses_.load(); }
  const std::string& dir() const { return dir_; }

 private:
  explicit BlobCache(std::string dir) : dir_(std::move(dir)) {}
  std::string blob_path(std::string_view sha256) const;
  std::string meta_path(std::string_view key, std::string_view kind) const;

  std::string dir_;
  std::atomic<uint64_t> hits_{0}, misses_{0}, temp_seq_{0};
};

}  // namespace cela::net
