#include "session/oci_import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "common/json_fields.h"
#include "common/sha256.h"
#include "rootfs/layers.h"
#include "session/fs_internal.h"
#include "session/tar.h"

namespace cela::session {
namespace json = boost::json;
using fs_detail::kInRoot;
using fs_detail::open_at;

namespace {

constexpr size_t kMaxJsonBytes = 4 << 20;

ArchiveReader new_reader() {
  ArchiveReader a(archive_read_new());
  archive_read_support_format_tar(a.get());
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_zstd(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_filter_bzip2(a.get());
  return a;
}

// Reads from memory in chunks (archive_read_open's callback form).
struct MemorySource {
  std::string_view data;
  bool done = false;
  static la_ssize_t read(archive*, void* self, const void** buf) {
    auto* s = static_cast<MemorySource*>(self);
    if (s->done) return 0;
    s->done = true;
    *buf = s->data.data();
    return static_cast<la_ssize_t>(s->data.size());
  }
};

// The inner (layer) archive reads the outer entry's data, hashing it on the way.
struct EntrySource {
  archive* outer;
  Sha256 hash;
  char buf[1 << 16];
  static la_ssize_t read(archive*, void* self, const void** out) {
    auto* s = static_cast<EntrySource*>(self);
    la_ssize_t n = archive_read_data(s->outer, s->buf, sizeof s->buf);
    if (n > 0) s->hash.update(std::string_view(s->buf, static_cast<size_t>(n)));
    *out = s->buf;
    return n;
  }
};

std::string clean_name(std::string name) {
  while (name.starts_with("./")) name.erase(0, 2);
  while (name.starts_with("/")) name.erase(0, 1);
  while (name.ends_with("/")) name.pop_back();
  return name;
}

bool safe_relative(const std::string& p) {
  if (p.empty()) return false;
  size_t pos = 0;
  while (pos <= p.size()) {
    size_t slash = p.find('/', pos);
    std::string comp = p.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    if (comp == ".." || comp.empty()) return false;
    if (slash == std::string::npos) break;
    pos = slash + 1;
  }
  return true;
}

// The outer archive: one pass to find the small JSON files and the entry names.
struct Outer {
  std::map<std::string, std::string> small;  // name -> content (JSON documents)
  std::set<std::string> names;
};

Result<Outer> scan(std::string_view archive_bytes) {
  Outer out;
  auto a = new_reader();
  MemorySource src{archive_bytes};
  if (archive_read_open(a.get(), &src, nullptr, &MemorySource::read, nullptr) != ARCHIVE_OK)
    return fail(ErrorCode::invalid_argument, "not a tar archive: " + archive_message(a.get()));
  archive_entry* e = nullptr;
  int r;
  while ((r = archive_read_next_header(a.get(), &e)) == ARCHIVE_OK) {
    std::string name = clean_name(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
    out.names.insert(name);
    bool json_doc = name == "index.json" || name == "manifest.json" || name == "oci-layout" ||
                    name.ends_with(".json") || (name.starts_with("blobs/") && archive_entry_size(e) < 65536);
    if (json_doc && archive_entry_size(e) <= static_cast<la_int64_t>(kMaxJsonBytes)) {
      std::string content;
      char buf[65536];
      la_ssize_t n;
      while ((n = archive_read_data(a.get(), buf, sizeof buf)) > 0) content.append(buf, static_cast<size_t>(n));
      out.small[name] = std::move(content);
    }
  }
  if (r != ARCHIVE_EOF) return fail(ErrorCode::invalid_argument, "reading the image tar: " + archive_message(a.get()));
  return out;
}

struct Image {
  std::vector<std::pair<std::string, std::string>> layers;  // entry name, expected sha256 hex ("" = unchecked)
  std::string config;                                       // config JSON
  std::string id;                                           // what identifies the image (manifest digest)
};

Result<json::object> parse_doc(const Outer& o, const std::string& name) {
  auto it = o.small.find(name);
  if (it == o.small.end()) return fail(ErrorCode::invalid_argument, "the image has no " + name);
  auto v = parse_json_object(it->second, name);
  if (!v) return std::unexpected(v.error());
  return v;
}

std::string blob_name(const std::string& digest) {
  auto colon = digest.find(':');
  return "blobs/" + digest.substr(0, colon) + "/" + digest.substr(colon + 1);
}

Result<Image> find_image(const Outer& o) {
  Image img;
  if (o.small.contains("index.json")) {
    auto index = parse_doc(o, "index.json");
    if (!index) return std::unexpected(index.error());
    std::string digest;
    // index -> (index ->) manifest
    for (int depth = 0; depth < 3; ++depth) {
      auto* manifests = index->if_contains("manifests");
      if (!manifests || !manifests->is_array() || manifests->as_array().empty())
        return fail(ErrorCode::invalid_argument, "index.json lists no manifest");
      const auto& m = manifests->as_array()[0];
      if (!m.is_object() || !m.as_object().contains("digest") || !m.as_object().at("digest").is_string())
        return fail(ErrorCode::invalid_argument, "index.json: a manifest without a digest");
      digest = std::string(m.as_object().at("digest").as_string());
      auto doc = parse_doc(o, blob_name(digest));
      if (!doc) return std::unexpected(doc.error());
      if (doc->contains("manifests")) {
        index = std::move(doc);
        continue;
      }
      auto* config = doc->if_contains("config");
      auto* layers = doc->if_contains("layers");
      if (!config || !config->is_object() || !layers || !layers->is_array())
        return fail(ErrorCode::invalid_argument, "the image manifest has no config or layers");
      auto* cd = config->as_object().if_contains("digest");
      if (!cd || !cd->is_string()) return fail(ErrorCode::invalid_argument, "the config has no digest");
      auto cfg = o.small.find(blob_name(std::string(cd->as_string())));
      if (cfg == o.small.end()) return fail(ErrorCode::invalid_argument, "the image has no config blob");
      img.config = cfg->second;
      for (const auto& l : layers->as_array()) {
        auto* ld = l.is_object() ? l.as_object().if_contains("digest") : nullptr;
        if (!ld || !ld->is_string()) return fail(ErrorCode::invalid_argument, "a layer without a digest");
        std::string d(ld->as_string());
        if (!d.starts_with("sha256:")) return fail(ErrorCode::invalid_argument, "layer digest " + d + " is not sha256");
        img.layers.emplace_back(blob_name(d), d.substr(7));
      }
      img.id = digest;
      return img;
    }
    return fail(ErrorCode::invalid_argument, "index.json nests too deep");
  }
  if (auto it = o.small.find("manifest.json"); it != o.small.end()) {
    std::error_code ec;
    auto v = json::parse(it->second, ec);
    if (ec || !v.is_array() || v.as_array().empty() || !v.as_array()[0].is_object())
      return fail(ErrorCode::invalid_argument, "manifest.json is not a docker save manifest");
    const auto& m = v.as_array()[0].as_object();
    auto* config = m.if_contains("Config");
    auto* layers = m.if_contains("Layers");
    if (!config || !config->is_string() || !layers || !layers->is_array())
      return fail(ErrorCode::invalid_argument, "manifest.json has no Config or Layers");
    auto cfg = o.small.find(clean_name(std::string(config->as_string())));
    if (cfg == o.small.end()) return fail(ErrorCode::invalid_argument, "the image has no config file");
    img.config = cfg->second;
    for (const auto& l : layers->as_array()) {
      if (!l.is_string()) return fail(ErrorCode::invalid_argument, "manifest.json: bad layer");
      img.layers.emplace_back(clean_name(std::string(l.as_string())), "");
    }
    // Set by the caller: a docker save manifest names layers by path, so only the whole
    // archive says what the image holds.
    img.id.clear();
    return img;
  }
  return fail(ErrorCode::invalid_argument, "neither an OCI layout (index.json) nor a docker save tar (manifest.json)");
}

// Applies layers into one directory.
class Applier {
 public:
  explicit Applier(UniqueFd root) : root_(std::move(root)) {}

  // The directory `rel` (created with 0755 root when missing), resolved in the root.
  Result<UniqueFd> dir(const std::string& rel) {
    if (rel.empty()) return fs_detail::dup_fd(root_.get(), "layer root");
    auto fd = open_at(root_.get(), rel, O_PATH | O_DIRECTORY, kInRoot, rel);
    if (fd) return fd;
    if (fd.error().err != ENOENT) return fd;
    auto slash = rel.rfind('/');
    auto parent = dir(slash == std::string::npos ? "" : rel.substr(0, slash));
    if (!parent) return parent;
    std::string name = slash == std::string::npos ? rel : rel.substr(slash + 1);
    if (::mkdirat(parent->get(), name.c_str(), 0755) != 0 && errno != EEXIST) return sys_fail("mkdir " + rel);
    return open_at(root_.get(), rel, O_PATH | O_DIRECTORY, kInRoot, rel);
  }

  Result<void> remove_at(int parent, const std::string& name, const std::string& rel) {
    struct stat st {};
    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return {};
    if (!S_ISDIR(st.st_mode)) {
      if (::unlinkat(parent, name.c_str(), 0) != 0) return sys_fail("remove " + rel);
      return {};
    }
    UniqueFd d(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!d) return sys_fail("open " + rel);
    if (auto r = empty(d.get(), rel, nullptr); !r) return r;
    if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) != 0) return sys_fail("remove " + rel);
    return {};
  }

  // Removes the children of `d` (except what the current layer made, for an opaque dir).
  Result<void> empty(int d, const std::string& rel, const std::set<std::string>* keep) {
    auto stream = fs_detail::DirStream::open(d, rel);
    if (!stream) return std::unexpected(stream.error());
    std::vector<std::string> names;
    while (true) {
      auto more = stream->read(names, 4096, rel);
      if (!more) return std::unexpected(more.error());
      if (!*more) break;
    }
    for (const auto& n : names) {
      std::string child = rel.empty() ? n : rel + "/" + n;
      if (keep && keep->contains(child)) continue;
      if (auto r = remove_at(d, n, child); !r) return r;
    }
    return {};
  }

  Result<void> entry(archive* a, archive_entry* e) {
    std::string path = clean_name(archive_entry_pathname(e) ? archive_entry_pathname(e) : "");
    if (path.empty() || path == ".") return {};
    if (!safe_relative(path)) return fail(ErrorCode::invalid_argument, "layer entry `" + path + "` leaves the root");
    auto slash = path.rfind('/');
    std::string parent_rel = slash == std::string::npos ? "" : path.substr(0, slash);
    std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
    auto parent = dir(parent_rel);
    if (!parent) return std::unexpected(parent.error());
    // O_PATH fds do not take *at mutations on every kernel path: reopen as a directory.
    auto pd = fs_detail::reopen(parent->get(), O_RDONLY | O_DIRECTORY, parent_rel);
    if (!pd) return std::unexpected(pd.error());
    int p = pd->get();
    if (name == ".wh..wh..opq") return empty(p, parent_rel, &made_);
    if (name.starts_with(".wh.")) {
      std::string victim = name.substr(4);
      return remove_at(p, victim, parent_rel.empty() ? victim : parent_rel + "/" + victim);
    }
    made_.insert(path);
    const uid_t uid = id(archive_entry_uid(e));
    const gid_t gid = id(archive_entry_gid(e));
    const mode_t perm = archive_entry_perm(e) & 07777;
    const struct timespec times[2] = {{archive_entry_mtime(e), 0}, {archive_entry_mtime(e), 0}};
    if (const char* hard = archive_entry_hardlink(e)) {
      std::string target = clean_name(hard);
      if (!safe_relative(target)) return fail(ErrorCode::invalid_argument, "hard link `" + path + "` leaves the root");
      auto ts = target.rfind('/');
      auto tdir = dir(ts == std::string::npos ? "" : target.substr(0, ts));
      if (!tdir) return std::unexpected(tdir.error());
      std::string tname = ts == std::string::npos ? target : target.substr(ts + 1);
      (void)remove_at(p, name, path);
      auto td = fs_detail::reopen(tdir->get(), O_RDONLY | O_DIRECTORY, target);
      if (!td) return std::unexpected(td.error());
      if (::linkat(td->get(), tname.c_str(), p, name.c_str(), 0) != 0) return sys_fail("link " + path);
      return {};
    }
    switch (archive_entry_filetype(e)) {
      case AE_IFDIR: {
        struct stat st {};
        if (::fstatat(p, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
          if (auto r = remove_at(p, name, path); !r) return r;
        if (::mkdirat(p, name.c_str(), 0700) != 0 && errno != EEXIST) return sys_fail("mkdir " + path);
        UniqueFd d(::openat(p, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!d) return sys_fail("open " + path);
        if (::fchown(d.get(), uid, gid) != 0 || ::fchmod(d.get(), perm) != 0) return sys_fail("chown " + path);
        (void)::futimens(d.get(), times);
        return {};
      }
      case AE_IFREG: {
        if (auto r = remove_at(p, name, path); !r) return r;
        UniqueFd f(::openat(p, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!f) return sys_fail("create " + path);
        char buf[1 << 16];
        la_ssize_t n;
        while ((n = archive_read_data(a, buf, sizeof buf)) > 0) {
          if (auto w = fs_detail::write_all(f.get(), std::string_view(buf, static_cast<size_t>(n)), path); !w) return w;
          bytes_ += static_cast<uint64_t>(n);
        }
        if (n < 0) return fail(ErrorCode::invalid_argument, "reading " + path + ": " + archive_message(a));
        if (::fchown(f.get(), uid, gid) != 0 || ::fchmod(f.get(), perm) != 0) return sys_fail("chown " + path);
        (void)::futimens(f.get(), times);
        return {};
      }
      case AE_IFLNK: {
        if (auto r = remove_at(p, name, path); !r) return r;
        const char* target = archive_entry_symlink(e);
        if (!target || ::symlinkat(target, p, name.c_str()) != 0) return sys_fail("symlink " + path);
        (void)::fchownat(p, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW);
        (void)::utimensat(p, name.c_str(), times, AT_SYMLINK_NOFOLLOW);
        return {};
      }
      case AE_IFIFO: {
        if (auto r = remove_at(p, name, path); !r) return r;
        if (::mknodat(p, name.c_str(), S_IFIFO | 0600, 0) != 0) return sys_fail("mkfifo " + path);
        (void)::fchownat(p, name.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW);
        (void)::fchmodat(p, name.c_str(), perm & 0777, 0);
        return {};
      }
      default:
        return {};  // devices and sockets never belong in a layer
    }
  }

  void next_layer() { made_.clear(); }
  uint64_t bytes() const { return bytes_; }
  int root() const { return root_.get(); }

 private:
  static uint32_t id(la_int64_t v) { return v >= 0 && v < 65536 ? static_cast<uint32_t>(v) : 0; }
  UniqueFd root_;
  std::set<std::string> made_;  // paths the current layer created
  uint64_t bytes_ = 0;
};

// Applies the outer entry `name` (a layer tar) with `applier`.
Result<void> apply_layer(std::string_view archive_bytes, const std::string& name, const std::string& sha256,
                         Applier& applier) {
  auto outer = new_reader();
  MemorySource src{archive_bytes};
  if (archive_read_open(outer.get(), &src, nullptr, &MemorySource::read, nullptr) != ARCHIVE_OK)
    return fail(ErrorCode::invalid_argument, archive_message(outer.get()));
  archive_entry* e = nullptr;
  while (archive_read_next_header(outer.get(), &e) == ARCHIVE_OK) {
    if (clean_name(archive_entry_pathname(e) ? archive_entry_pathname(e) : "") != name) continue;
    EntrySource in{outer.get(), Sha256(), {}};
    auto layer = new_reader();
    archive_read_support_format_empty(layer.get());
    if (archive_read_open(layer.get(), &in, nullptr, &EntrySource::read, nullptr) != ARCHIVE_OK)
      return fail(ErrorCode::invalid_argument, "layer " + name + ": " + archive_message(layer.get()));
    archive_entry* le = nullptr;
    int r;
    applier.next_layer();
    while ((r = archive_read_next_header(layer.get(), &le)) == ARCHIVE_OK)
      if (auto ok = applier.entry(layer.get(), le); !ok) {
        // An entry that cannot be applied inside the layer (through a symlink to nowhere,
        // a hard link to a missing file) is a bad image, not a missing resource.
        const int err = ok.error().err;
        const bool image_fault = ok.error().code == ErrorCode::not_found ||
                                 ok.error().code == ErrorCode::permission_denied || err == ENOENT || err == EEXIST ||
                                 err == ENOTDIR || err == EISDIR || err == ELOOP || err == EXDEV || err == EPERM ||
                                 err == EACCES || err == EMLINK || err == ENAMETOOLONG || err == EINVAL;
        if (image_fault) return fail(ErrorCode::invalid_argument, "layer " + name + ": " + ok.error().message());
        return ok;
      }
    if (r != ARCHIVE_EOF) return fail(ErrorCode::invalid_argument, "layer " + name + ": " + archive_message(layer.get()));
    // Whatever the layer reader left unread still counts for the digest.
    char buf[1 << 16];
    la_ssize_t n;
    while ((n = archive_read_data(outer.get(), buf, sizeof buf)) > 0) in.hash.update(std::string_view(buf, static_cast<size_t>(n)));
    if (!sha256.empty() && in.hash.hex_final() != sha256)
      return fail(ErrorCode::invalid_argument, "layer " + name + " does not match its digest");
    return {};
  }
  return fail(ErrorCode::invalid_argument, "the image has no layer " + name);
}

// A passwd line's fields for `want` (a name or a uid), from the layer's /etc/passwd.
std::optional<rootfs::TemplateUser> find_user(int root, const std::string& want) {
  auto fd = open_at(root, "etc/passwd", O_RDONLY, kInRoot, "/etc/passwd");
  if (!fd) return std::nullopt;
  std::string text;
  char buf[8192];
  ssize_t n;
  while ((n = ::read(fd->get(), buf, sizeof buf)) > 0 && text.size() < (1 << 20)) text.append(buf, static_cast<size_t>(n));
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    auto u = rootfs::passwd_account(line);
    if (u && (u->name == want || std::to_string(u->uid) == want)) return u;
  }
  return std::nullopt;
}

}  // namespace

Result<rootfs::Template> import_oci_image(const rootfs::TemplateStore& store, const std::string& name,
                                          std::string_view archive_bytes, const std::string& built_by) {
  auto outer = scan(archive_bytes);
  if (!outer) return std::unexpected(outer.error());
  auto image = find_image(*outer);
  if (!image) return std::unexpected(image.error());
  // The id keys the layer cache: a docker save tar is identified by all of its bytes
  // (its manifest.json alone is the same for images of different content).
  if (image->id.empty()) image->id = "sha256:" + sha256_hex(archive_bytes);
  for (const auto& [entry, digest] : image->layers)
    if (!outer->names.contains(entry)) return fail(ErrorCode::invalid_argument, "the image has no layer " + entry);

  rootfs::Template t;
  auto config = parse_json_object(image->config, "image config");
  if (!config) return std::unexpected(config.error());
  std::string user_spec;
  if (auto* c = config->if_contains("config"); c && c->is_object()) {
    const auto& cfg = c->as_object();
    if (auto* env = cfg.if_contains("Env"); env && env->is_array())
      for (const auto& kv : env->as_array())
        if (kv.is_string() && kv.as_string().find('=') != json::string::npos) t.env.emplace_back(kv.as_string());
    if (auto* wd = cfg.if_contains("WorkingDir"); wd && wd->is_string() && wd->as_string().starts_with("/"))
      t.workdir = std::string(wd->as_string());
    if (auto* u = cfg.if_contains("User"); u && u->is_string()) user_spec = std::string(u->as_string());
  }

  auto lock = rootfs::StoreLock::shared(store);
  if (!lock) return std::unexpected(lock.error());
  const std::string key = sha256_hex("cela oci import 1\n" + image->id);
  std::string path = rootfs::layer_path(store, key);
  auto meta = rootfs::read_layer_meta(store, key);
  if (!meta) {
    auto staged = rootfs::StagedLayer::create(store);
    if (!staged) return std::unexpected(staged.error());
    UniqueFd root(::open(staged->dir().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root) return sys_fail("open " + staged->dir());
    Applier applier(std::move(root));
    for (const auto& [entry, digest] : image->layers)
      if (auto r = apply_layer(archive_bytes, entry, digest, applier); !r) return std::unexpected(r.error());
    auto digest = rootfs::layer_digest(staged->dir());
    if (!digest) return std::unexpected(digest.error());
    meta = rootfs::LayerMeta{*digest, applier.bytes(),
                             "oci image " + image->id.substr(0, 19) + " (" + std::to_string(image->layers.size()) +
                                 " layers)"};
    auto committed = staged->commit(key);
    if (!committed) return std::unexpected(committed.error());
    path = *committed;
    if (auto w = rootfs::write_layer_meta(store, key, *meta); !w) return std::unexpected(w.error());
  }
  UniqueFd root(::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return sys_fail("open " + path);
  std::string want = user_spec.substr(0, user_spec.find(':'));
  std::optional<rootfs::TemplateUser> account;
  if (!want.empty() && want != "root" && want != "0") account = find_user(root.get(), want);
  if (!account) account = find_user(root.get(), "1000");
  t.user = account.value_or(rootfs::TemplateUser{"user", 1000, 1000, "/"});
  t.layers = {path};
  t.layer_meta = {*meta};
  t.size_bytes = meta->size_bytes;
  t.source = "oci";
  t.recipe = key;
  return rootfs::commit_stacked_version(store, name, std::move(t), built_by);
}

}  // namespace cela::session
