// The template store: manifests, versions, `current`, staging and commit.
#include "rootfs/template.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <tuple>
#include <filesystem>
#include <utility>

#include "common/fs.h"
#include "common/json_fields.h"
#include "rootfs/store_io.h"

namespace cela::rootfs {

namespace json = boost::json;

namespace {

constexpr char kManifest[] = "manifest.json";

std::string template_dir(const TemplateStore& store, const std::string& name) {
  return store.root + "/" + name;
}

std::string version_dir(const TemplateStore& store, const std::string& name,
                        const std::string& version) {
  return store.root + "/" + name + "/" + version;
}

// boost::json 1.81 has no pretty printer; manifests are read by people too.
void pretty(const json::value& v, std::string& out, int indent) {
  auto newline = [&](int level) {
    out.push_back('\n');
    out.append(static_cast<size_t>(level) * 2, ' ');
  };
  switch (v.kind()) {
    case json::kind::object: {
      const auto& obj = v.get_object();
      if (obj.empty()) {
        out += "{}";
        return;
      }
      out.push_back('{');
      bool first = true;
      for (const auto& [key, value] : obj) {
        if (!first) out.push_back(',');
        first = false;
        newline(indent + 1);
        out += json::serialize(json::value(key));
        out += ": ";
        pretty(value, out, indent + 1);
      }
      newline(indent);
      out.push_back('}');
      return;
    }
    case json::kind::array: {
      const auto& arr = v.get_array();
      if (arr.empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < arr.size(); ++i) {
        if (i != 0) out.push_back(',');
        newline(indent + 1);
        pretty(arr[i], out, indent + 1);
      }
      newline(indent);
      out.push_back(']');
      return;
    }
    default:
      out += json::serialize(v);
  }
}

json::object to_object(const Template& t) {
  json::array packages;
  for (const auto& p : t.packages) packages.emplace_back(p);
  json::array layers;
  for (const auto& l : t.layers) layers.emplace_back(l);
  json::array binds;
  for (const auto& b : t.binds)
    binds.emplace_back(json::object{{"source", b.source}, {"target", b.target}});
  // Insertion order is the printed order.
  json::object obj;
  obj["name"] = t.name;
  obj["version"] = t.version;
  obj["digest"] = t.digest;
  obj["built_at"] = t.built_at;
  obj["allow_sudo"] = t.allow_sudo;
  obj["user"] = json::object{{"name", t.user.name}, {"uid", t.user.uid}, {"gid", t.user.gid}, {"home", t.user.home}};
  obj["dev_only"] = t.dev_only;
  obj["layers"] = std::move(layers);
  obj["binds"] = std::move(binds);
  obj["recipe"] = t.recipe;
  obj["packages"] = std::move(packages);
  if (!t.layer_meta.empty()) {
    json::array meta;
    for (const auto& m : t.layer_meta)
      meta.emplace_back(json::object{{"digest", m.digest}, {"size_bytes", m.size_bytes}, {"created_by", m.created_by}});
    obj["layer_meta"] = std::move(meta);
  }
  if (!t.env.empty()) {
    json::array env;
    for (const auto& e : t.env) env.emplace_back(e);
    obj["env"] = std::move(env);
  }
  if (!t.workdir.empty()) obj["workdir"] = t.workdir;
  if (!t.built_by.empty()) obj["built_by"] = t.built_by;
  obj["size_bytes"] = t.size_bytes;
  if (!t.parent.empty()) obj["parent"] = t.parent;
  if (!t.source.empty()) obj["source"] = t.source;
  if (!t.aliases.empty()) {
    json::array aliases;
    for (const auto& a : t.aliases) aliases.emplace_back(a);
    obj["aliases"] = std::move(aliases);
  }
  if (t.start) {
    json::object start{{"cmd", t.start->cmd}, {"user", t.start->user}};
    if (t.start->ready_port) {
      start["ready_port"] = t.start->ready_port;
      start["ready_timeout_s"] = t.start->ready_timeout_s;
    }
    obj["start"] = std::move(start);
  }
  return obj;
}

Result<Template> parse_manifest(const std::string& text, const std::string& path) {
  auto bad = [&](const Error& e) {
    return std::unexpected(Error{ErrorCode::internal, 0, "malformed manifest " + path + ": " + e.context});
  };
  auto root = parse_json_object(text, "manifest");
  if (!root) return bad(root.error());
  // Manifests written by newer builds may carry more keys: read what this one knows.
  JsonFields f(*root);
  Template t;
  const std::pair<const char*, std::string*> required[] = {
      {"name", &t.name}, {"version", &t.version}, {"digest", &t.digest}, {"built_at", &t.built_at}};
  for (auto [key, field] : required) {
    auto v = f.require_string(key);
    if (!v) return bad(v.error());
    *field = std::move(*v);
  }
  auto recipe = f.string("recipe");
  if (!recipe) return bad(recipe.error());
  t.recipe = recipe->value_or("");
  for (auto [key, field] : {std::pair{"allow_sudo", &t.allow_sudo}, std::pair{"dev_only", &t.dev_only}}) {
    auto v = f.boolean(key);
    if (!v) return bad(v.error());
    *field = v->value_or(false);
  }
  for (auto [key, field] : {std::pair{"packages", &t.packages}, std::pair{"layers", &t.layers}}) {
    auto v = f.string_array(key);
    if (!v) return bad(v.error());
    if (*v) *field = std::move(**v);
  }
  if (t.layers.empty()) return bad(Error{ErrorCode::internal, 0, "no layers"});
  for (auto [key, field] : {std::pair{"workdir", &t.workdir}, std::pair{"built_by", &t.built_by},
                            std::pair{"parent", &t.parent}, std::pair{"source", &t.source}}) {
    auto v = f.string(key);
    if (!v) return bad(v.error());
    *field = v->value_or("");
  }
  if (auto env = f.string_array("env"); !env) return bad(env.error());
  else if (*env) t.env = std::move(**env);
  auto size = f.integer("size_bytes");
  if (!size) return bad(size.error());
  t.size_bytes = static_cast<uint64_t>(std::max<int64_t>(0, size->value_or(0)));
  auto meta = f.array("layer_meta");
  if (!meta) return bad(meta.error());
  if (*meta) {
    for (const auto& item : **meta) {
      if (!item.is_object()) return bad(Error{ErrorCode::internal, 0, "a layer_meta entry must be an object"});
      JsonFields m(item.get_object(), "layer_meta[]");
      auto digest = m.require_string("digest");
      if (!digest) return bad(digest.error());
      auto bytes = m.integer("size_bytes");
      if (!bytes) return bad(bytes.error());
      auto by = m.string("created_by");
      if (!by) return bad(by.error());
      t.layer_meta.push_back({*digest, static_cast<uint64_t>(std::max<int64_t>(0, bytes->value_or(0))), by->value_or("")});
    }
    if (t.layer_meta.size() != t.layers.size())
      return bad(Error{ErrorCode::internal, 0, "layer_meta and layers differ in length"});
  } else if (t.layers.size() == 1) {
    t.layer_meta.push_back({t.digest, t.size_bytes, t.source});
  } else {
    for (size_t i = 0; i < t.layers.size(); ++i) t.layer_meta.push_back({"", 0, ""});
  }
  auto user = f.object("user");
  if (!user) return bad(user.error());
  if (*user) {
    const JsonFields& u = **user;
    auto name = u.require_string("name");
    if (!name) return bad(name.error());
    auto uid = u.require_integer("uid");
    if (!uid) return bad(uid.error());
    auto gid = u.require_integer("gid");
    if (!gid) return bad(gid.error());
    auto home = u.require_string("home");
    if (!home) return bad(home.error());
    auto id_ok = [](int64_t id) { return id > 0 && id < 65536; };
    if (name->empty() || !id_ok(*uid) || !id_ok(*gid) || !home->starts_with("/"))
      return bad(Error{ErrorCode::internal, 0, "\"user\" needs a name, uid and gid in 1..65535 and an absolute home"});
    t.user = {*name, static_cast<uint32_t>(*uid), static_cast<uint32_t>(*gid), *home};
  }
  if (auto aliases = f.string_array("aliases"); !aliases) return bad(aliases.error());
  else if (*aliases) t.aliases = std::move(**aliases);
  auto start = f.object("start");
  if (!start) return bad(start.error());
  if (*start) {
    auto parsed = parse_start_command(**start);
    if (!parsed) return bad(parsed.error());
    t.start = std::move(*parsed);
  }
  auto binds = f.array("binds");
  if (!binds) return bad(binds.error());
  if (*binds) {
    for (const auto& item : **binds) {
      if (!item.is_object()) return bad(Error{ErrorCode::internal, 0, "a bind must be an object"});
      JsonFields b(item.get_object(), "binds[]");
      auto source = b.require_string("source");
      if (!source) return bad(source.error());
      auto target = b.require_string("target");
      if (!target) return bad(target.error());
      t.binds.push_back({*source, *target});
    }
  }
  return t;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// The store root holds setuid-root files: only root may traverse it.
Result<void> ensure_template_dir(const TemplateStore& store, const std::string& name) {
  auto parent = std::filesystem::path(store.root).parent_path().string();
  if (auto r = make_dirs(parent, 0755); !r) return r;
  if (::mkdir(store.root.c_str(), 0700) != 0 && errno != EEXIST)
    return sys_fail("mkdir " + store.root);
  if (::chmod(store.root.c_str(), 0700) != 0) return sys_fail("chmod " + store.root);
  std::string dir = template_dir(store, name);
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return sys_fail("mkdir " + dir);
  return {};
}

}  // namespace

Result<StartCommand> parse_start_command(const JsonFields& f) {
  if (auto ok = f.only({"cmd", "user", "ready_port", "ready_timeout_s"}); !ok) return std::unexpected(ok.error());
  StartCommand c;
  auto cmd = f.require_string("cmd");
  if (!cmd) return std::unexpected(cmd.error());
  if (cmd->empty()) return std::unexpected(f.invalid("cmd", "must not be empty"));
  c.cmd = std::move(*cmd);
  auto user = f.string("user");
  if (!user) return std::unexpected(user.error());
  c.user = user->value_or("");
  auto port = f.integer("ready_port");
  if (!port) return std::unexpected(port.error());
  if (*port && (**port < 1 || **port > 65535)) return std::unexpected(f.invalid("ready_port", "must be 1..65535"));
  c.ready_port = static_cast<uint16_t>(port->value_or(0));
  auto timeout = f.integer("ready_timeout_s");
  if (!timeout) return std::unexpected(timeout.error());
  if (*timeout && (**timeout < 1 || **timeout > 600))
    return std::unexpected(f.invalid("ready_timeout_s", "must be 1..600"));
  c.ready_timeout_s = static_cast<uint32_t>(timeout->value_or(60));
  return c;
}

std::optional<TemplateUser> passwd_account(std::string_view line) {
  std::vector<std::string> f;
  size_t pos = 0;
  line = line.substr(0, line.find('\n'));
  for (;;) {
    size_t c = line.find(':', pos);
    f.emplace_back(line.substr(pos, c == std::string_view::npos ? std::string_view::npos : c - pos));
    if (c == std::string_view::npos) break;
    pos = c + 1;
  }
  if (f.size() < 7 || f[0].empty()) return std::nullopt;
  auto id = [](const std::string& s) -> std::optional<uint32_t> {
    uint32_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || v == 0 || v >= 65536) return std::nullopt;
    return v;
  };
  auto uid = id(f[2]), gid = id(f[3]);
  if (!uid || !gid || !f[5].starts_with("/")) return std::nullopt;
  return TemplateUser{f[0], *uid, *gid, f[5]};
}

bool valid_template_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  auto alnum = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!alnum(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return alnum(c) || c == '.' || c == '_' || c == '-'; });
}

std::string template_to_json(const Template& t) {
  std::string out;
  pretty(to_object(t), out, 0);
  out.push_back('\n');
  return out;
}

Result<Template> load_template_version(const TemplateStore& store, const std::string& name,
                                       const std::string& version) {
  if (!valid_template_name(name))
    return fail(ErrorCode::invalid_argument, "bad template name '" + name + "'");
  if (!valid_template_name(version))
    return fail(ErrorCode::invalid_argument, "bad template version '" + version + "'");
  std::string dir = version_dir(store, name, version);
  std::string path = dir + "/" + kManifest;
  auto text = read_file(path);
  if (!text) {
    if (text.error().err == ENOENT && !std::filesystem::exists(template_dir(store, name)))
      if (auto target = alias_target(store, name)) return load_template_version(store, *target, version);
    if (text.error().err == ENOENT)
      return fail(ErrorCode::not_found, "template " + name + " version " + version);
    return std::unexpected(text.error());
  }
  auto t = parse_manifest(*text, path);
  if (!t) return t;
  if (t->name != name || t->version != version)
    return fail(ErrorCode::internal, "manifest " + path + " names " + t->name + "@" + t->version);
  for (auto& layer : t->layers) {
    std::filesystem::path p(layer);
    if (p.is_relative()) layer = (std::filesystem::path(dir) / p).lexically_normal().string();
  }
  return t;
}

Result<Template> load_template(const TemplateStore& store, const std::string& name) {
  if (!valid_template_name(name))
    return fail(ErrorCode::invalid_argument, "bad template name '" + name + "'");
  auto current = read_file(template_dir(store, name) + "/current");
  if (!current) {
    if (current.error().err != ENOENT) return std::unexpected(current.error());
    if (name == "host") return ensure_host_template(store);
    if (!std::filesystem::exists(template_dir(store, name)))
      if (auto target = alias_target(store, name)) return load_template(store, *target);
    return fail(ErrorCode::not_found, "template " + name + " not found in " + store.root);
  }
  return load_template_version(store, name, trim(*current));
}

std::optional<std::string> alias_target(const TemplateStore& store, const std::string& alias) {
  auto all = list_templates(store);
  if (!all) return std::nullopt;
  for (const auto& t : *all)
    if (std::ranges::find(t.aliases, alias) != t.aliases.end()) return t.name;
  return std::nullopt;
}

Result<std::vector<Template>> list_templates(const TemplateStore& store) {
  std::vector<Template> out;
  DIR* dir = ::opendir(store.root.c_str());
  if (dir == nullptr) {
    if (errno == ENOENT) return out;
    return sys_fail("opendir " + store.root);
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.' && valid_template_name(e->d_name)) names.emplace_back(e->d_name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    auto current = read_file(template_dir(store, name) + "/current");
    if (!current) continue;
    if (auto t = load_template_version(store, name, trim(*current))) out.push_back(std::move(*t));
  }
  return out;
}

Result<std::vector<Template>> list_versions(const TemplateStore& store, const std::string& name) {
  if (!valid_template_name(name))
    return fail(ErrorCode::invalid_argument, "bad template name '" + name + "'");
  std::vector<Template> out;
  std::string dir = template_dir(store, name);
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> versions;
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.' && valid_template_name(e->d_name) && std::string_view(e->d_name) != "current")
        versions.emplace_back(e->d_name);
    ::closedir(d);
    for (const auto& v : versions)
      if (auto t = load_template_version(store, name, v)) out.push_back(std::move(*t));
  } else if (errno != ENOENT) {
    return sys_fail("opendir " + dir);
  }
  if (out.empty()) return fail(ErrorCode::not_found, "template " + name + " not found");
  std::sort(out.begin(), out.end(), [](const Template& a, const Template& b) {
    return std::tie(a.built_at, a.version) < std::tie(b.built_at, b.version);
  });
  return out;
}

Result<void> remove_version(const TemplateStore& store, const std::string& name, const std::string& version) {
  if (!valid_template_name(name) || !valid_template_name(version))
    return fail(ErrorCode::invalid_argument, "bad template name or version");
  const std::string tdir = template_dir(store, name);
  std::string vdir = version_dir(store, name, version);
  struct stat st {};
  if (::lstat((vdir + "/" + kManifest).c_str(), &st) != 0)
    return fail(ErrorCode::not_found, "template " + name + " has no version " + version);
  auto lock = BuildLock::acquire(tdir);
  if (!lock) return std::unexpected(lock.error());
  if (::lstat((vdir + "/" + kManifest).c_str(), &st) != 0)
    return fail(ErrorCode::not_found, "template " + name + " has no version " + version);
  std::string doomed = tdir + "/.deleting-XXXXXX";
  if (::mkdtemp(doomed.data()) == nullptr) return sys_fail("mkdtemp " + doomed);
  if (::rename(vdir.c_str(), (doomed + "/v").c_str()) != 0) {
    auto e = sys_fail("rename " + vdir);
    ::rmdir(doomed.c_str());
    return std::unexpected(e.error());
  }
  auto removed = remove_tree(doomed);
  auto rest = list_versions(store, name);
  if (rest) {
    if (auto r = set_current_version(store, name, rest->back().version); !r) return r;
  } else {
    ::unlink((tdir + "/current").c_str());
    ::unlink((tdir + "/.lock").c_str());
    ::rmdir(tdir.c_str());  // only when nothing else is left in it
  }
  return removed;
}

std::string next_version_name(const TemplateStore& store, const std::string& name) {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char date[16];
  std::strftime(date, sizeof date, "%Y.%m.%d-", &tm);
  int highest = 0;
  if (DIR* d = ::opendir(template_dir(store, name).c_str())) {
    while (const dirent* e = ::readdir(d)) {
      std::string_view entry(e->d_name);
      if (!entry.starts_with(date)) continue;
      highest = std::max(highest, std::atoi(std::string(entry.substr(std::strlen(date))).c_str()));
    }
    ::closedir(d);
  }
  return date + std::to_string(highest + 1);
}

TemplateStore tenant_store(const TemplateStore& shared, const std::string& tenant_id) {
  return {shared.root + "/.tenants/" + tenant_id, shared.cache};
}

Result<void> set_current_version(const TemplateStore& store, const std::string& name,
                                 const std::string& version) {
  std::string manifest = version_dir(store, name, version) + "/" + kManifest;
  struct stat st {};
  if (::stat(manifest.c_str(), &st) != 0) return sys_fail("stat " + manifest);
  return write_file_atomic(template_dir(store, name) + "/current", version + "\n", 0644);
}

Result<StagedVersion> StagedVersion::create(const TemplateStore& store, const std::string& name) {
  if (!valid_template_name(name))
    return fail(ErrorCode::invalid_argument, "bad template name '" + name + "'");
  if (auto r = ensure_template_dir(store, name); !r) return std::unexpected(r.error());
  std::string dir = template_dir(store, name) + "/.staging-XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) return sys_fail("mkdtemp " + dir);
  StagedVersion staged(store, name, dir);
  if (auto r = make_dir_exact(staged.layer_dir(), 0755, ::geteuid(), ::getegid()); !r)
    return std::unexpected(r.error());
  return staged;
}

StagedVersion::StagedVersion(StagedVersion&& other) noexcept
    : store_(std::move(other.store_)),
      name_(std::move(other.name_)),
      dir_(std::exchange(other.dir_, std::string())) {}

StagedVersion::~StagedVersion() {
  if (dir_.empty()) return;
  if (auto r = remove_tree(dir_); !r)
    std::fprintf(stderr, "cela: cleaning up %s: %s\n", dir_.c_str(), r.error().message().c_str());
}

Result<Template> StagedVersion::commit(const Template& manifest) {
  if (dir_.empty()) return fail(ErrorCode::internal, "commit of a finished staging dir");
  if (manifest.name != name_)
    return fail(ErrorCode::internal, "manifest for " + manifest.name + " staged as " + name_);
  if (!valid_template_name(manifest.version))
    return fail(ErrorCode::invalid_argument, "bad template version '" + manifest.version + "'");
  std::string target = version_dir(store_, name_, manifest.version);
  struct stat st {};
  if (::lstat(target.c_str(), &st) == 0)
    return fail(ErrorCode::invalid_argument, "template version exists: " + target);

  Template stored = manifest;
  if (stored.layers.empty()) stored.layers = {"layer"};
  for (auto& layer : stored.layers) {
    std::filesystem::path p(layer);
    if (p.is_relative()) continue;
    if (layer.starts_with(dir_ + "/"))
      layer = layer.substr(dir_.size() + 1);
    else
      layer = p.lexically_normal().lexically_relative(target).string();
  }
  if (auto r = write_file_atomic(dir_ + "/" + kManifest, template_to_json(stored), 0644); !r)
    return std::unexpected(r.error());

  // The version becomes visible in one rename; flush the tree first so a crash
  // right after cannot leave a committed version with missing file contents.
  {
    UniqueFd fd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd || ::syncfs(fd.get()) != 0) return sys_fail("syncfs " + dir_);
  }
  if (::rename(dir_.c_str(), target.c_str()) != 0)
    return sys_fail("rename " + dir_ + " to " + target);
  dir_.clear();
  if (auto r = set_current_version(store_, name_, manifest.version); !r)
    return std::unexpected(r.error());
  return load_template_version(store_, name_, manifest.version);
}

}  // namespace cela::rootfs
