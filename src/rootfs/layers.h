// Layers of built, snapshotted and imported template versions.
//
// A store keeps such layers once, by key, in <store>/.layers/<key>/ (the tree itself);
// versions refer to them from their manifests (relative paths), so versions that share
// a parent stack share its layers, and a build step whose key is already there is a
// cache hit. Keys are sha256 hex: of a build step's inputs and its parent (template
// builds), of the captured tree (snapshots), of the OCI image's layer digests
// (imports). A tenant's layers live in the tenant's own store (tenant_store), so a
// cache hit never hands one tenant what another tenant's step produced.
//
// Layer trees hold ids as the sandbox sees them (root = 0), like the base layer: the
// jail shows every layer through an idmapped mount of the session's user namespace.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "rootfs/template.h"

namespace cela::rootfs {

// <store>/.layers/<key>
std::string layer_path(const TemplateStore& store, const std::string& key);

// Bytes of regular-file content below `dir` (symlinks not followed).
uint64_t tree_bytes(const std::string& dir);

// "sha256:<hex>" over the layers' digests, bottom first: the digest of a stack.
std::string stack_digest(const std::vector<LayerMeta>& layers);

// flock(2) on <store>/.store-lock. Shared while a layer is being made and until the
// version that refers to it is committed; exclusive (never waiting) for collect_layers.
class StoreLock {
 public:
  static Result<StoreLock> shared(const TemplateStore& store);
  // nullopt-like: an error with code `conflict` when someone holds it.
  static Result<StoreLock> exclusive_now(const TemplateStore& store);

 private:
  explicit StoreLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

// A layer being made: <store>/.layers/.staging-XXXXXX/, removed unless committed.
class StagedLayer {
 public:
  static Result<StagedLayer> create(const TemplateStore& store);
  StagedLayer(StagedLayer&& other) noexcept;
  StagedLayer& operator=(StagedLayer&&) = delete;
  StagedLayer(const StagedLayer&) = delete;
  StagedLayer& operator=(const StagedLayer&) = delete;
  ~StagedLayer();

  const std::string& dir() const { return dir_; }
  // syncfs, then renames it to layer_path(store, key); when that key exists already
  // (another build made it meanwhile), the existing one is kept. Returns the path.
  Result<std::string> commit(const std::string& key);

 private:
  StagedLayer(TemplateStore store, std::string dir) : store_(std::move(store)), dir_(std::move(dir)) {}
  TemplateStore store_;
  std::string dir_;
};

// How the ids of a captured tree map back to the ids the sandbox sees: a file owned by
// host id `base + n` (n < count) is stored as n; ids outside the range become 0.
struct IdShift {
  uint32_t host_base = 0;
  uint32_t count = 65536;
};

// Copies the tree of the directory `src_fd` into the existing empty directory `dest`:
// directories, regular files (hard links kept as links), symlinks, fifos and overlay
// whiteouts (0:0 character devices), with modes, owners (shifted), times, the overlay's
// opaque-directory mark and user.* xattrs. Other devices and sockets are skipped.
// Never follows a symlink of the source. invalid_argument past 512 levels. Returns the
// bytes of regular-file content copied.
Result<uint64_t> copy_layer_tree(int src_fd, const std::string& dest, IdShift shift);

// Writes `t` (layers absolute, layer_meta parallel) as a new version of `name` in
// `store` and makes it current: the version is named by the date (next_version_name,
// under the template's build lock), built_at is now, built_by `built_by`, digest the
// stack's. Returns the version as loaded.
Result<Template> commit_stacked_version(const TemplateStore& store, const std::string& name, Template t,
                                        const std::string& built_by);

// <store>/.layers/<key>.json: what a cached layer is (digest, size, the step that made
// it). Written once the layer is committed; a layer without it is not a cache hit.
Result<void> write_layer_meta(const TemplateStore& store, const std::string& key, const LayerMeta& meta);
// nullopt unless both the layer and its meta file are there.
std::optional<LayerMeta> read_layer_meta(const TemplateStore& store, const std::string& key);

// Removes <store>/.layers/<key> dirs that no version of the store refers to. Skipped
// (returns 0) while a build or snapshot holds the store lock. Returns how many went.
Result<int> collect_layers(const TemplateStore& store);

}  // namespace cela::rootfs
