// The gateway's npm front-end: the registry protocol npm speaks (a packument per
// package, tarballs below it). The gateway always reads the full packument upstream
// (the abbreviated one has no publish times), removes the versions the policy refuses
// (rules, lock, cooldown), points every tarball at itself, moves dist-tags off removed
// versions, and checks each tarball against the packument's integrity (sha512) or
// shasum before it enters the cache.
#include <boost/json.hpp>

#include "common/time.h"
#include "net/gateway_internal.h"

namespace cela::net {
namespace json = boost::json;
namespace {

std::string escape_name(const std::string& name) {
  // "@scope/pkg" travels as "@scope%2fpkg" (the registry's own form).
  std::string out;
  for (char c : name) out += c == '/' ? std::string("%2f") : std::string(1, c);
  return out;
}

bool valid_name(std::string_view name) {
  if (name.empty() || name.size() > 214) return false;
  size_t slash = name.find('/');
  if (name[0] == '@') {
    if (slash == std::string_view::npos || slash < 2 || slash + 1 >= name.size()) return false;
    if (name.find('/', slash + 1) != std::string_view::npos) return false;
  } else if (slash != std::string_view::npos) {
    return false;
  }
  return name.find_first_of(" \t\r\n\"'<>\\?#%") == std::string_view::npos;
}

std::optional<int64_t> published(const json::object& packument, std::string_view version) {
  const auto* time = packument.if_contains("time");
  if (!time || !time->is_object()) return std::nullopt;
  const auto* t = time->as_object().if_contains(version);
  if (!t || !t->is_string()) return std::nullopt;
  auto ms = parse_rfc3339(std::string(t->as_string()));
  if (!ms) return std::nullopt;
  return *ms;
}

std::string basename_of(std::string_view url) {
  url = url.substr(0, url.find_first_of("?#"));
  return std::string(url.substr(url.rfind('/') + 1));
}

std::expected<json::object, GatewayAnswer> load_packument(GatewayCore& core, GatewayRequest& r, const std::string& name,
                                                          int fresh_s) {
  std::string base = core.config().npm;
  if (!base.ends_with('/')) base += '/';
  auto meta = core.metadata(r, "npm:" + name, base + escape_name(name), "application/json", fresh_s);
  if (!meta) return std::unexpected(meta.error());
  boost::system::error_code ec;
  json::value v = json::parse(slurp(meta->path), ec);
  if (ec || !v.is_object()) return std::unexpected(GatewayCore::refuse(502, "npm:" + name + ": the upstream packument is not JSON"));
  return std::move(v.as_object());
}

GatewayAnswer packument(GatewayCore& core, GatewayRequest& r, const std::string& name) {
  int64_t now = now_ms();
  Decision by_name = decide(r.session.policy, Registry::npm, name, "", std::nullopt, now);
  if (!by_name.allowed) return core.refuse_package(r, Registry::npm, name, "", by_name);
  auto p = load_packument(core, r, name, 0);
  if (!p) return p.error();
  json::object& doc = *p;
  auto* versions = doc.if_contains("versions");
  if (!versions || !versions->is_object()) return GatewayCore::refuse(502, "npm:" + name + ": the packument has no versions");
  json::object kept;
  std::vector<std::string> kept_names;
  std::string refusals;
  for (auto& [version, meta] : versions->as_object()) {
    std::string v(version);
    Decision d = decide(r.session.policy, Registry::npm, name, v, published(doc, v), now);
    if (!d.allowed) {
      if (refusals.size() < 600) refusals += (refusals.empty() ? "" : "; ") + d.reason;
      continue;
    }
    if (meta.is_object())
      if (auto* dist = meta.as_object().if_contains("dist"); dist && dist->is_object())
        if (auto* tarball = dist->as_object().if_contains("tarball"); tarball && tarball->is_string())
          *tarball = "http://" + r.host + "/npm/" + name + "/-/" + basename_of(tarball->as_string());
    kept[version] = std::move(meta);
    kept_names.push_back(v);
  }
  if (kept_names.empty()) {
    Decision d;
    d.rule = "versions";
    d.reason = "no version of npm:" + name + " is allowed: " + refusals;
    return core.refuse_package(r, Registry::npm, name, "", d);
  }
  doc["versions"] = std::move(kept);
  if (auto* time = doc.if_contains("time"); time && time->is_object()) {
    json::object t;
    for (auto& [k, val] : time->as_object())
      if (k == "created" || k == "modified" || std::ranges::find(kept_names, std::string(k)) != kept_names.end())
        t[k] = val;
    *time = std::move(t);
  }
  // dist-tags may point only at served versions; `latest` falls back to the newest
  // served release.
  json::object tags;
  if (auto* dt = doc.if_contains("dist-tags"); dt && dt->is_object())
    for (auto& [tag, val] : dt->as_object())
      if (val.is_string() && std::ranges::find(kept_names, std::string(val.as_string())) != kept_names.end())
        tags[tag] = val;
  if (!tags.contains("latest")) {
    std::string best;
    for (const auto& v : kept_names)
      if (v.find('-') == std::string::npos && (best.empty() || compare_versions(v, best) > 0)) best = v;
    if (best.empty()) best = kept_names.back();
    tags["latest"] = best;
  }
  doc["dist-tags"] = std::move(tags);
  GatewayAnswer a;
  a.content_type = "application/json";
  a.body = json::serialize(doc);
  return a;
}

GatewayAnswer tarball(GatewayCore& core, GatewayRequest& r, const std::string& name, const std::string& filename) {
  auto p = load_packument(core, r, name, 600);
  if (!p) return p.error();
  auto find = [&](const json::object& doc) -> std::optional<FileWant> {
    const auto* versions = doc.if_contains("versions");
    if (!versions || !versions->is_object()) return std::nullopt;
    for (const auto& [version, meta] : versions->as_object()) {
      if (!meta.is_object()) continue;
      const auto* dist = meta.as_object().if_contains("dist");
      if (!dist || !dist->is_object()) continue;
      const auto* url = dist->as_object().if_contains("tarball");
      if (!url || !url->is_string() || basename_of(url->as_string()) != filename) continue;
      FileWant w;
      w.registry = Registry::npm;
      w.name = name;
      w.version = std::string(version);
      w.filename = filename;
      w.url = std::string(url->as_string());
      w.published_ms = published(doc, w.version);
      w.content_type = "application/octet-stream";
      if (auto* integrity = dist->as_object().if_contains("integrity"); integrity && integrity->is_string()) {
        std::string_view i = integrity->as_string();
        if (i.starts_with("sha512-")) w.sha512_base64 = std::string(i.substr(7));
      }
      if (auto* shasum = dist->as_object().if_contains("shasum"); shasum && shasum->is_string())
        w.sha1_hex = std::string(shasum->as_string());
      // npm publishes no sha256: the cache finds the blob through the verified digest.
      if (w.sha512_base64) w.note_key = "npm-sha512:" + *w.sha512_base64;
      else if (w.sha1_hex) w.note_key = "npm-sha1:" + *w.sha1_hex;
      return w;
    }
    return std::nullopt;
  };
  auto want = find(*p);
  if (!want && r.session.policy.mode == PackageMode::gateway) {
    p = load_packument(core, r, name, 0);
    if (!p) return p.error();
    want = find(*p);
  }
  if (!want) return GatewayCore::refuse(404, "npm:" + name + " has no tarball " + filename);
  return core.deliver(r, *want);
}

}  // namespace

GatewayAnswer serve_npm(GatewayCore& core, GatewayRequest& r) {
  std::string path = r.path;
  if (path.starts_with("-/")) return GatewayCore::refuse(404, "the npm gateway serves packages only");
  if (auto dash = path.find("/-/"); dash != std::string::npos) {
    std::string name = path.substr(0, dash), file = path.substr(dash + 3);
    if (!valid_name(name) || file.empty() || file.find('/') != std::string::npos)
      return GatewayCore::refuse(404, "no such tarball");
    return tarball(core, r, name, file);
  }
  if (path.ends_with('/')) path.pop_back();
  if (!valid_name(path)) return GatewayCore::refuse(404, "not a package name: " + path);
  return packument(core, r, path);
}

}  // namespace cela::net
