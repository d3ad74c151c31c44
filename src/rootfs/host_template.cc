// The dev-only `host` template: the host's /usr, bound read-only, under a small
// generated layer. The layer carries its own /etc so no host account, secret or
// resolver setting shows inside; only the dynamic linker cache and the
// /etc/alternatives links are copied, because binaries in the host /usr need them
// (awk, editor, pager… are alternatives links).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/fs.h"
#include "rootfs/store_io.h"
#include "rootfs/template.h"

namespace cela::rootfs {

namespace {

// Bumped whenever the generated layer changes shape; part of the manifest recipe.
constexpr char kHostRecipe[] = "cela host template v1";

constexpr uid_t kUserId = 1000;

constexpr char kPasswd[] =
    "root:x:0:0:root:/root:/bin/bash\n"
    "user:x:1000:1000::/home/user:/bin/bash\n"
    "nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n";
// No sudo group: the host template never promises sudo (allow_sudo=false).
constexpr char kGroup[] =
    "root:x:0:\n"
    "tty:x:5:\n"
    "user:x:1000:\n"
    "nogroup:x:65534:\n";
constexpr char kHostname[] = "cela\n";
constexpr char kHosts[] =
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n";
constexpr char kNsswitch[] =
    "passwd:   files\n"
    "group:    files\n"
    "shadow:   files\n"
    "hosts:    files\n"
    "networks: files\n"
    "services: files\n"
    "protocols: files\n";

// Top-level names that merged-/usr hosts keep as links into /usr.
constexpr const char* kUsrLinks[] = {"bin", "sbin", "lib", "lib32", "lib64", "libx32"};

// cp -a of the symlinks in `src` (other entries are skipped: they would be host files).
Result<void> copy_symlinks(const std::string& src, const std::string& dst) {
  DIR* dir = ::opendir(src.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) return {};
    return sys_fail("opendir " + src);
  }
  Result<void> result;
  char target[4096];
  while (const dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    std::string from = src + "/" + name;
    struct stat st {};
    if (::lstat(from.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) continue;
    ssize_t n = ::readlink(from.c_str(), target, sizeof target - 1);
    if (n < 0) {
      result = sys_fail("readlink " + from);
      break;
    }
    target[n] = '\0';
    std::string to = dst + "/" + name;
    if (::symlink(target, to.c_str()) != 0) {
      result = sys_fail("symlink " + to);
      break;
    }
  }
  ::closedir(dir);
  return result;
}

Result<void> generate_host_layer(const std::string& layer) {
  struct Dir {
    const char* path;
    mode_t mode;
    uid_t owner;
  };
  // Parents before children.
  static constexpr Dir kDirs[] = {
      {"etc", 0755, 0},
      {"etc/alternatives", 0755, 0},
      {"usr", 0755, 0},
      {"proc", 0555, 0},
      {"dev", 0755, 0},
      {"tmp", 01777, 0},
      {"root", 0700, 0},
      {"home", 0755, 0},
      {"home/user", 0755, kUserId},
      {"run", 0755, 0},
      {"var", 0755, 0},
      {"var/tmp", 01777, 0},
  };
  if (auto r = make_dir_exact(layer, 0755); !r) return r;
  for (const auto& d : kDirs) {
    if (auto r = make_dir_exact(layer + "/" + d.path, d.mode, d.owner, d.owner); !r) return r;
  }

  struct File {
    const char* path;
    std::string_view content;
  };
  const File files[] = {
      {"etc/passwd", kPasswd},          {"etc/group", kGroup},
      {"etc/hostname", kHostname},      {"etc/hosts", kHosts},
      {"etc/nsswitch.conf", kNsswitch},
  };
  for (const auto& f : files) {
    if (auto r = write_file_exact(layer + "/" + f.path, f.content, 0644); !r) return r;
  }

  auto cache = read_file("/etc/ld.so.cache");
  if (!cache) return std::unexpected(cache.error());
  if (auto r = write_file_exact(layer + "/etc/ld.so.cache", *cache, 0644); !r) return r;
  if (auto r = copy_symlinks("/etc/alternatives", layer + "/etc/alternatives"); !r) return r;

  char target[4096];
  for (const char* name : kUsrLinks) {
    std::string host = std::string("/") + name;
    ssize_t n = ::readlink(host.c_str(), target, sizeof target - 1);
    if (n < 0) continue;  // absent, or a real directory on a host without merged /usr
    target[n] = '\0';
    std::string link = layer + "/" + name;
    if (::symlink(target, link.c_str()) != 0) return sys_fail("symlink " + link);
  }
  return {};
}

}  // namespace

Result<Template> ensure_host_template(const TemplateStore& store) {
  auto staged = StagedVersion::create(store, "host");
  if (!staged) return std::unexpected(staged.error());
  auto lock = BuildLock::acquire(store.root + "/host");
  if (!lock) return std::unexpected(lock.error());

  if (auto r = generate_host_layer(staged->layer_dir()); !r) return std::unexpected(r.error());
  auto digest = layer_digest(staged->layer_dir());
  if (!digest) return std::unexpected(digest.error());
  // "sha256:" + 12 hex digits.
  std::string version = "host-" + digest->substr(7, 12);

  // Same layer as an existing version: keep that version (and its built_at).
  if (auto existing = load_template_version(store, "host", version)) {
    if (auto r = set_current_version(store, "host", version); !r) return std::unexpected(r.error());
    return existing;
  }

  Template t;
  t.name = "host";
  t.version = version;
  t.digest = *digest;
  t.built_at = cela::now_rfc3339();
  t.layers = {staged->layer_dir()};
  t.binds = {{"/usr", "/usr"}};
  t.allow_sudo = false;
  t.dev_only = true;
  t.source = "host";
  t.built_by = "host";
  t.recipe = sha256_hex(kHostRecipe);
  auto committed = staged->commit(t);
  if (committed) std::fprintf(stderr, "host: generated version %s\n", version.c_str());
  return committed;
}

}  // namespace cela::rootfs
