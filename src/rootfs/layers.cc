#include "rootfs/layers.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include <boost/json.hpp>

#include "common/fs.h"
#include "common/json_fields.h"
#include "rootfs/store_io.h"

namespace cela::rootfs {

namespace {

constexpr int kMaxDepth = 512;
constexpr char kOpaque[] = "trusted.overlay.opaque";

std::string layers_dir(const TemplateStore& store) { return store.root + "/.layers"; }

Result<void> ensure_layers_dir(const TemplateStore& store) {
  auto parent = std::filesystem::path(store.root).parent_path().string();
  if (auto r = make_dirs(parent, 0700); !r) return r;
  if (::mkdir(store.root.c_str(), 0700) != 0 && errno != EEXIST) return sys_fail("mkdir " + store.root);
  if (::mkdir(layers_dir(store).c_str(), 0755) != 0 && errno != EEXIST) return sys_fail("mkdir " + layers_dir(store));
  return {};
}

std::vector<std::string> entries(int dir_fd) {
  std::vector<std::string> out;
  // Its own open file description (a dup would share, and move, the caller's position).
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return out;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return out;
  }
  while (const dirent* e = ::readdir(d)) {
    std::string_view n(e->d_name);
    if (n != "." && n != "..") out.emplace_back(n);
  }
  ::closedir(d);
  return out;
}

// The xattrs a layer keeps: the overlay's opaque mark and user.* (what programs set).
void copy_xattrs(int src, int dst) {
  char names[8192];
  ssize_t n = ::flistxattr(src, names, sizeof names);
  for (ssize_t i = 0; n > 0 && i < n; i += static_cast<ssize_t>(std::strlen(names + i)) + 1) {
    std::string_view name(names + i);
    if (name != kOpaque && !name.starts_with("user.")) continue;
    char value[4096];
    ssize_t len = ::fgetxattr(src, names + i, value, sizeof value);
    if (len >= 0) (void)::fsetxattr(dst, names + i, value, static_cast<size_t>(len), 0);
  }
}

struct TreeCopy {
  IdShift shift;
  int dest_root = -1;
  uint64_t bytes = 0;
  std::map<std::pair<dev_t, ino_t>, std::string> links;  // first copy of a hard-linked file

  uint32_t id(uint32_t host) const {
    return host >= shift.host_base && host - shift.host_base < shift.count ? host - shift.host_base : 0;
  }

  Result<void> owner_mode_times(int fd, const struct stat& st, const std::string& rel) {
    if (::fchown(fd, id(st.st_uid), id(st.st_gid)) != 0) return sys_fail("chown " + rel);
    if (::fchmod(fd, st.st_mode & 07777) != 0) return sys_fail("chmod " + rel);  // after chown: it clears setuid
    const struct timespec times[2] = {st.st_atim, st.st_mtim};
    (void)::futimens(fd, times);
    return {};
  }

  Result<void> copy_file(int src_dir, int dst_dir, const std::string& name, const struct stat& st,
                         const std::string& rel) {
    if (st.st_nlink > 1) {
      auto it = links.find({st.st_dev, st.st_ino});
      if (it != links.end()) {
        if (::linkat(dest_root, it->second.c_str(), dst_dir, name.c_str(), 0) != 0) return sys_fail("link " + rel);
        return {};
      }
      links[{st.st_dev, st.st_ino}] = rel;
    }
    UniqueFd in(::openat(src_dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
    if (!in) return sys_fail("open " + rel);
    UniqueFd out(::openat(dst_dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out) return sys_fail("create " + rel);
    for (;;) {
      ssize_t n = ::copy_file_range(in.get(), nullptr, out.get(), nullptr, 1 << 30, 0);
      if (n < 0 && (errno == EXDEV || errno == EINVAL || errno == EOPNOTSUPP || errno == ENOSYS)) {
        char buf[1 << 16];
        while ((n = ::read(in.get(), buf, sizeof buf)) > 0) {
          for (ssize_t off = 0; off < n;) {
            ssize_t w = ::write(out.get(), buf + off, static_cast<size_t>(n - off));
            if (w < 0) return sys_fail("write " + rel);
            off += w;
          }
        }
        if (n < 0) return sys_fail("read " + rel);
        break;
      }
      if (n < 0) return sys_fail("copy " + rel);
      if (n == 0) break;
    }
    bytes += static_cast<uint64_t>(st.st_size);
    copy_xattrs(in.get(), out.get());
    return owner_mode_times(out.get(), st, rel);
  }

  Result<void> copy_dir(int src, int dst, const std::string& rel, int depth) {
    if (depth > kMaxDepth) return fail(ErrorCode::invalid_argument, "directory tree deeper than 512 levels: " + rel);
    for (const auto& name : entries(src)) {
      std::string path = rel.empty() ? name : rel + "/" + name;
      struct stat st {};
      if (::fstatat(src, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return sys_fail("stat " + path);
      switch (st.st_mode & S_IFMT) {
        case S_IFDIR: {
          if (::mkdirat(dst, name.c_str(), 0700) != 0) return sys_fail("mkdir " + path);
          UniqueFd s(::openat(src, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
          UniqueFd d(::openat(dst, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
          if (!s || !d) return sys_fail("open " + path);
          if (auto r = copy_dir(s.get(), d.get(), path, depth + 1); !r) return r;
          copy_xattrs(s.get(), d.get());
          if (auto r = owner_mode_times(d.get(), st, path); !r) return r;
          break;
        }
        case S_IFREG:
          if (auto r = copy_file(src, dst, name, st, path); !r) return r;
          break;
        case S_IFLNK: {
          std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
          ssize_t n = ::readlinkat(src, name.c_str(), target.data(), target.size());
          if (n < 0) return sys_fail("readlink " + path);
          target.resize(static_cast<size_t>(n));
          if (::symlinkat(target.c_str(), dst, name.c_str()) != 0) return sys_fail("symlink " + path);
          (void)::fchownat(dst, name.c_str(), id(st.st_uid), id(st.st_gid), AT_SYMLINK_NOFOLLOW);
          const struct timespec times[2] = {st.st_atim, st.st_mtim};
          (void)::utimensat(dst, name.c_str(), times, AT_SYMLINK_NOFOLLOW);
          break;
        }
        case S_IFCHR:
          // An overlay whiteout (the file is deleted in this layer); real devices never
          // belong in a layer.
          if (st.st_rdev != makedev(0, 0)) break;
          [[fallthrough]];
        case S_IFIFO: {
          if (::mknodat(dst, name.c_str(), (st.st_mode & S_IFMT) | 0600, 0) != 0) return sys_fail("mknod " + path);
          (void)::fchownat(dst, name.c_str(), id(st.st_uid), id(st.st_gid), AT_SYMLINK_NOFOLLOW);
          (void)::fchmodat(dst, name.c_str(), st.st_mode & 0777, 0);
          break;
        }
        default:
          break;  // sockets, block devices
      }
    }
    return {};
  }
};

// The version directories' layers (absolute, normalized) of every template in `store`.
std::set<std::string> referenced_layers(const TemplateStore& store) {
  std::set<std::string> out;
  DIR* d = ::opendir(store.root.c_str());
  if (d == nullptr) return out;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.' && valid_template_name(e->d_name)) names.emplace_back(e->d_name);
  ::closedir(d);
  for (const auto& name : names) {
    auto versions = list_versions(store, name);
    if (!versions) continue;
    for (const auto& v : *versions)
      for (const auto& l : v.layers) out.insert(std::filesystem::path(l).lexically_normal().string());
  }
  return out;
}

}  // namespace

std::string layer_path(const TemplateStore& store, const std::string& key) { return layers_dir(store) + "/" + key; }

uint64_t tree_bytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2) && !it->is_symlink(e2)) total += it->file_size(e2);
  }
  return total;
}

std::string stack_digest(const std::vector<LayerMeta>& layers) {
  if (layers.size() == 1) return layers[0].digest;
  Sha256 h;
  for (const auto& l : layers) h.update(l.digest + "\n");
  return "sha256:" + h.hex_final();
}

Result<StoreLock> StoreLock::shared(const TemplateStore& store) {
  if (auto r = ensure_layers_dir(store); !r) return std::unexpected(r.error());
  std::string path = store.root + "/.store-lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_fail("open " + path);
  while (::flock(fd.get(), LOCK_SH) != 0)
    if (errno != EINTR) return sys_fail("flock " + path);
  return StoreLock(std::move(fd));
}

Result<StoreLock> StoreLock::exclusive_now(const TemplateStore& store) {
  std::string path = store.root + "/.store-lock";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_fail("open " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return fail(ErrorCode::conflict, "the template store is busy");
    return sys_fail("flock " + path);
  }
  return StoreLock(std::move(fd));
}

Result<StagedLayer> StagedLayer::create(const TemplateStore& store) {
  if (auto r = ensure_layers_dir(store); !r) return std::unexpected(r.error());
  std::string dir = layers_dir(store) + "/.staging-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return sys_fail("mkdtemp " + dir);
  if (::chmod(dir.c_str(), 0755) != 0) return sys_fail("chmod " + dir);
  return StagedLayer(store, dir);
}

StagedLayer::StagedLayer(StagedLayer&& other) noexcept
    : store_(std::move(other.store_)), dir_(std::exchange(other.dir_, std::string())) {}

StagedLayer::~StagedLayer() {
  if (dir_.empty()) return;
  if (auto r = remove_tree(dir_); !r)
    std::fprintf(stderr, "cela: cleaning up %s: %s\n", dir_.c_str(), r.error().message().c_str());
}

Result<std::string> StagedLayer::commit(const std::string& key) {
  if (dir_.empty()) return fail(ErrorCode::internal, "commit of a finished layer");
  {
    UniqueFd fd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd || ::syncfs(fd.get()) != 0) return sys_fail("syncfs " + dir_);
  }
  std::string target = layer_path(store_, key);
  if (::rename(dir_.c_str(), target.c_str()) != 0) {
    if (errno != EEXIST && errno != ENOTEMPTY) return sys_fail("rename " + dir_ + " to " + target);
    return target;  // made by someone else meanwhile: the destructor drops ours
  }
  dir_.clear();
  return target;
}

Result<uint64_t> copy_layer_tree(int src_fd, const std::string& dest, IdShift shift) {
  UniqueFd root(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return sys_fail("open " + dest);
  TreeCopy copy;
  copy.shift = shift;
  copy.dest_root = root.get();
  if (auto r = copy.copy_dir(src_fd, root.get(), "", 0); !r) return std::unexpected(r.error());
  copy_xattrs(src_fd, root.get());
  return copy.bytes;
}

Result<Template> commit_stacked_version(const TemplateStore& store, const std::string& name, Template t,
                                        const std::string& built_by) {
  auto staged = StagedVersion::create(store, name);
  if (!staged) return std::unexpected(staged.error());
  ::rmdir(staged->layer_dir().c_str());  // the layers live in <store>/.layers
  auto lock = BuildLock::acquire(store.root + "/" + name);
  if (!lock) return std::unexpected(lock.error());
  t.name = name;
  t.version = next_version_name(store, name);
  t.built_at = now_rfc3339();
  t.built_by = built_by;
  t.digest = stack_digest(t.layer_meta);
  t.tenant.clear();
  return staged->commit(t);
}

Result<void> write_layer_meta(const TemplateStore& store, const std::string& key, const LayerMeta& meta) {
  boost::json::object o{{"digest", meta.digest}, {"size_bytes", meta.size_bytes}, {"created_by", meta.created_by}};
  return write_file_atomic(layer_path(store, key) + ".json", boost::json::serialize(o) + "\n", 0644);
}

std::optional<LayerMeta> read_layer_meta(const TemplateStore& store, const std::string& key) {
  struct stat st {};
  if (::stat(layer_path(store, key).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return std::nullopt;
  auto text = read_file(layer_path(store, key) + ".json");
  if (!text) return std::nullopt;
  auto o = parse_json_object(*text, "layer meta");
  if (!o) return std::nullopt;
  JsonFields f(*o);
  auto digest = f.require_string("digest");
  auto size = f.integer("size_bytes");
  auto by = f.string("created_by");
  if (!digest || !size || !by) return std::nullopt;
  return LayerMeta{*digest, static_cast<uint64_t>(size->value_or(0)), by->value_or("")};
}

Result<int> collect_layers(const TemplateStore& store) {
  auto lock = StoreLock::exclusive_now(store);
  if (!lock) {
    if (lock.error().code == ErrorCode::conflict) return 0;
    return std::unexpected(lock.error());
  }
  auto keep = referenced_layers(store);
  int removed = 0;
  UniqueFd dir(::open(layers_dir(store).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) {
    if (errno == ENOENT) return 0;
    return sys_fail("open " + layers_dir(store));
  }
  for (const auto& name : entries(dir.get())) {
    if (name.starts_with(".")) continue;  // staging dirs belong to running builds
    if (name.ends_with(".json")) {
      std::string layer = layer_path(store, name.substr(0, name.size() - 5));
      if (!keep.contains(std::filesystem::path(layer).lexically_normal().string())) ::unlink((layer + ".json").c_str());
      continue;
    }
    std::string path = layer_path(store, name);
    if (keep.contains(std::filesystem::path(path).lexically_normal().string())) continue;
    if (auto r = remove_tree(path); !r) return std::unexpected(r.error());
    ++removed;
  }
  return removed;
}

}  // namespace cela::rootfs
