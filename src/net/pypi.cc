// The gateway's PyPI front-end: the simple API (PEP 503 HTML and PEP 691 JSON, with
// PEP 700 upload times) for pip. The upstream index is read in either form; what the
// session may install is served in the form pip asks for, with file links back to the
// gateway (/pypi/files/<project>/<file>). Versions the policy refuses (rules, lock,
// cooldown) are left out; when no version of the project could be allowed (a refusal
// by name), the files are listed and each download is refused with the reason, which
// is what pip prints.
#include <boost/json.hpp>

#include "common/time.h"
#include "net/gateway_internal.h"

namespace cela::net {
namespace json = boost::json;
namespace {

struct PyFile {
  std::string filename, url, requires_python, version;
  std::optional<std::string> sha256;
  std::optional<std::string> yanked;  // the reason ("" = yanked without one)
  std::optional<int64_t> upload_ms;
  std::optional<int64_t> size;
};

std::string version_of(const std::string& filename) {
  if (filename.ends_with(".whl")) {
    auto a = filename.find('-');
    if (a == std::string::npos) return "";
    auto b = filename.find('-', a + 1);
    return filename.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  }
  std::string stem = filename;
  for (std::string_view ext : {".tar.gz", ".tar.bz2", ".tar.xz", ".zip", ".tgz", ".egg"})
    if (stem.ends_with(ext)) {
      stem.resize(stem.size() - ext.size());
      break;
    }
  auto dash = stem.rfind('-');
  return dash == std::string::npos ? "" : stem.substr(dash + 1);
}

std::string unescape_html(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    auto semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 8) {
      out += '&';
      continue;
    }
    std::string_view ent = s.substr(i + 1, semi - i - 1);
    if (ent == "lt") out += '<';
    else if (ent == "gt") out += '>';
    else if (ent == "amp") out += '&';
    else if (ent == "quot") out += '"';
    else if (ent == "#39" || ent == "apos") out += '\'';
    else out += "&" + std::string(ent) + ";";
    i = semi;
  }
  return out;
}

std::string escape_html(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::optional<std::string> attribute(std::string_view tag, std::string_view name) {
  size_t pos = 0;
  while ((pos = tag.find(name, pos)) != std::string_view::npos) {
    bool boundary = pos > 0 && (tag[pos - 1] == ' ' || tag[pos - 1] == '\n' || tag[pos - 1] == '\t');
    size_t eq = pos + name.size();
    while (eq < tag.size() && tag[eq] == ' ') ++eq;
    if (!boundary || eq >= tag.size()) {
      pos += name.size();
      continue;
    }
    if (tag[eq] != '=') return boundary ? std::optional<std::string>("") : std::nullopt;  // a bare attribute
    size_t v = eq + 1;
    while (v < tag.size() && tag[v] == ' ') ++v;
    if (v >= tag.size()) return std::nullopt;
    char quote = tag[v];
    if (quote == '"' || quote == '\'') {
      auto end = tag.find(quote, v + 1);
      if (end == std::string_view::npos) return std::nullopt;
      return unescape_html(tag.substr(v + 1, end - v - 1));
    }
    auto end = tag.find_first_of(" >", v);
    return unescape_html(tag.substr(v, end == std::string_view::npos ? std::string_view::npos : end - v));
  }
  return std::nullopt;
}

std::vector<PyFile> parse_html(const std::string& text, const std::string& base) {
  std::vector<PyFile> out;
  size_t pos = 0;
  while ((pos = text.find("<a", pos)) != std::string::npos) {
    auto close = text.find('>', pos);
    if (close == std::string::npos) break;
    std::string_view tag(text.data() + pos, close - pos);
    auto end = text.find("</a>", close);
    std::string label = unescape_html(std::string_view(text).substr(close + 1, end == std::string::npos ? 0 : end - close - 1));
    pos = close;
    auto href = attribute(tag, "href");
    if (!href) continue;
    PyFile f;
    std::string link = *href;
    if (auto hash = link.find("#sha256="); hash != std::string::npos) f.sha256 = link.substr(hash + 8, 64);
    link = link.substr(0, link.find('#'));
    f.url = resolve_url(base, link);
    std::string name = link.substr(link.rfind('/') + 1);
    f.filename = label.empty() ? name : label;
    if (auto rp = attribute(tag, "data-requires-python")) f.requires_python = *rp;
    if (auto y = attribute(tag, "data-yanked")) f.yanked = *y;
    f.version = version_of(f.filename);
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<PyFile> parse_json(const std::string& text, const std::string& base) {
  std::vector<PyFile> out;
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return out;
  const auto* files = v.as_object().if_contains("files");
  if (!files || !files->is_array()) return out;
  for (const auto& item : files->as_array()) {
    if (!item.is_object()) continue;
    const auto& o = item.as_object();
    PyFile f;
    if (auto* fn = o.if_contains("filename"); fn && fn->is_string()) f.filename = std::string(fn->as_string());
    if (auto* u = o.if_contains("url"); u && u->is_string()) f.url = resolve_url(base, std::string(u->as_string()));
    if (f.filename.empty() || f.url.empty()) continue;
    if (auto* h = o.if_contains("hashes"); h && h->is_object())
      if (auto* s = h->as_object().if_contains("sha256"); s && s->is_string()) f.sha256 = std::string(s->as_string());
    if (auto* rp = o.if_contains("requires-python"); rp && rp->is_string()) f.requires_python = std::string(rp->as_string());
    if (auto* y = o.if_contains("yanked")) {
      if (y->is_string()) f.yanked = std::string(y->as_string());
      else if (y->is_bool() && y->as_bool()) f.yanked = "";
    }
    if (auto* t = o.if_contains("upload-time"); t && t->is_string())
      if (auto ms = parse_rfc3339(std::string(t->as_string()))) f.upload_ms = *ms;
    if (auto* sz = o.if_contains("size"); sz && sz->is_int64()) f.size = sz->as_int64();
    f.version = version_of(f.filename);
    out.push_back(std::move(f));
  }
  return out;
}

struct Project {
  std::string name;
  std::vector<PyFile> files;
};

std::expected<Project, GatewayAnswer> load_project(GatewayCore& core, GatewayRequest& r, const std::string& project,
                                                   int fresh_s) {
  std::string base = core.config().pypi;
  if (!base.ends_with('/')) base += '/';
  auto meta = core.metadata(r, "pypi:" + project, base + project + "/",
                            "application/vnd.pypi.simple.v1+json, text/html;q=0.1", fresh_s);
  if (!meta) return std::unexpected(meta.error());
  std::string text = slurp(meta->path);
  Project p;
  p.name = project;
  bool is_json = meta->content_type.find("json") != std::string::npos || (!text.empty() && text[0] == '{');
  p.files = is_json ? parse_json(text, meta->final_url) : parse_html(text, meta->final_url);
  return p;
}

// A refusal by name (mode off, registry, deny, lock, allow rules): no version of the
// project can be installed. The upstream is not asked; the page lists one placeholder
// file whose download is refused with the reason, because pip prints a refused
// download's reason and hides a refused index's.
Decision by_name(GatewayCore& core, GatewayRequest& r, const std::string& project) {
  Decision d = core.registry_decision(r.session, Registry::pypi);
  if (d.allowed) d = decide(r.session.policy, Registry::pypi, project, "", std::nullopt, now_ms());
  return d;
}

std::string placeholder(const std::string& project) {
  std::string name = project;
  std::ranges::replace(name, '-', '_');
  return name + "-0-py3-none-any.whl";
}

GatewayAnswer index_page(GatewayCore& core, GatewayRequest& r, const std::string& project) {
  int64_t now = now_ms();
  std::vector<PyFile> listed;
  Decision named = by_name(core, r, project);
  if (!named.allowed) {
    PyFile f;
    f.filename = placeholder(project);
    f.version = "0";
    listed.push_back(f);
  } else {
    auto p = load_project(core, r, project, 0);
    if (!p) return p.error();
    listed = std::move(p->files);
  }
  std::vector<const PyFile*> shown;
  for (const auto& f : listed)
    if (!named.allowed || decide(r.session.policy, Registry::pypi, project, f.version, f.upload_ms, now).allowed)
      shown.push_back(&f);
  auto link = [&](const PyFile& f) { return "../../files/" + project + "/" + f.filename; };
  GatewayAnswer a;
  if (r.accept.find("application/vnd.pypi.simple.v1+json") != std::string::npos) {
    json::object o;
    o["meta"] = json::object{{"api-version", "1.1"}};
    o["name"] = project;
    json::array files;
    json::array versions;
    for (const PyFile* f : shown) {
      json::object e;
      e["filename"] = f->filename;
      e["url"] = link(*f);
      json::object hashes;
      if (f->sha256) hashes["sha256"] = *f->sha256;
      e["hashes"] = hashes;
      if (!f->requires_python.empty()) e["requires-python"] = f->requires_python;
      if (f->yanked) e["yanked"] = f->yanked->empty() ? json::value(true) : json::value(*f->yanked);
      if (f->upload_ms) e["upload-time"] = format_rfc3339(*f->upload_ms);
      if (f->size) e["size"] = *f->size;
      files.push_back(std::move(e));
      if (std::ranges::find(versions, json::value(f->version)) == versions.end()) versions.push_back(json::value(f->version));
    }
    o["files"] = std::move(files);
    o["versions"] = std::move(versions);
    a.content_type = "application/vnd.pypi.simple.v1+json";
    a.body = json::serialize(o);
    return a;
  }
  a.content_type = "text/html; charset=utf-8";
  a.body = "<!DOCTYPE html>\n<html><head><meta name=\"pypi:repository-version\" content=\"1.0\"><title>Links for " +
           escape_html(project) + "</title></head><body><h1>Links for " + escape_html(project) + "</h1>\n";
  for (const PyFile* f : shown) {
    a.body += "<a href=\"" + escape_html(link(*f)) + (f->sha256 ? "#sha256=" + *f->sha256 : "") + "\"";
    if (!f->requires_python.empty()) a.body += " data-requires-python=\"" + escape_html(f->requires_python) + "\"";
    if (f->yanked) a.body += " data-yanked=\"" + escape_html(*f->yanked) + "\"";
    a.body += ">" + escape_html(f->filename) + "</a><br/>\n";
  }
  a.body += "</body></html>\n";
  return a;
}

GatewayAnswer file(GatewayCore& core, GatewayRequest& r, const std::string& project, const std::string& filename) {
  Decision named = by_name(core, r, project);
  if (!named.allowed) return core.refuse_package(r, Registry::pypi, project, "", named);
  auto p = load_project(core, r, project, 600);
  if (!p) return p.error();
  auto it = std::ranges::find_if(p->files, [&](const PyFile& f) { return f.filename == filename; });
  if (it == p->files.end()) {
    // The index may have changed since it was cached: ask once more.
    if (r.session.policy.mode == PackageMode::gateway) {
      p = load_project(core, r, project, 0);
      if (!p) return p.error();
      it = std::ranges::find_if(p->files, [&](const PyFile& f) { return f.filename == filename; });
    }
    if (it == p->files.end()) return GatewayCore::refuse(404, "pypi:" + project + " has no file " + filename);
  }
  FileWant want;
  want.registry = Registry::pypi;
  want.name = project;
  want.version = it->version;
  want.filename = it->filename;
  want.url = it->url;
  want.sha256 = it->sha256;
  want.published_ms = it->upload_ms;
  return core.deliver(r, want);
}

}  // namespace

GatewayAnswer serve_pypi(GatewayCore& core, GatewayRequest& r) {
  std::string_view path = r.path;
  if (path == "simple/" || path == "simple") {
    GatewayAnswer a;
    a.content_type = "text/html; charset=utf-8";
    a.body = "<!DOCTYPE html>\n<html><body><!-- cela package gateway: ask for /pypi/simple/<project>/ --></body></html>\n";
    return a;
  }
  if (path.starts_with("simple/")) {
    std::string_view rest = path.substr(7);
    if (rest.ends_with('/')) rest.remove_suffix(1);
    if (rest.empty() || rest.find('/') != std::string_view::npos) return GatewayCore::refuse(404, "no such index page");
    return index_page(core, r, normalize_name(Registry::pypi, rest));
  }
  if (path.starts_with("files/")) {
    std::string_view rest = path.substr(6);
    auto slash = rest.find('/');
    if (slash == std::string_view::npos || slash + 1 >= rest.size() || rest.find('/', slash + 1) != std::string_view::npos)
      return GatewayCore::refuse(404, "no such file");
    return file(core, r, normalize_name(Registry::pypi, rest.substr(0, slash)), std::string(rest.substr(slash + 1)));
  }
  return GatewayCore::refuse(404, "the PyPI gateway serves /pypi/simple/<project>/");
}

}  // namespace cela::net
