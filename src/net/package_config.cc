// Package config and request parsing (package_config.h).
#include "net/package_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/fs.h"

namespace cela::net {
namespace {

std::unexpected<Error> in(const std::string& where, const Error& e) {
  return std::unexpected(Error{e.code, 0, where + e.context});
}

Result<std::vector<Registry>> registries_of(const JsonFields& f, std::string_view key) {
  auto list = f.string_array(key);
  if (!list) return std::unexpected(list.error());
  std::vector<Registry> out;
  if (!*list) return out;
  for (const auto& name : **list) {
    auto r = registry_named(name);
    if (!r) return std::unexpected(f.invalid(key, "names an unknown registry `" + name + "` (pypi, npm, debian)"));
    out.push_back(*r);
  }
  return out;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '"')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '"')) ++i;
  return s.substr(i);
}

std::string https(std::string url) {
  if (url.starts_with("http://")) url = "https://" + url.substr(7);
  return url;
}

// `key = value` (npmrc, pip.conf) from the first file that has it.
std::string setting(const std::vector<std::string>& files, const std::string& key) {
  for (const auto& path : files) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      auto eq = line.find('=');
      if (eq == std::string::npos) continue;
      if (trim(line.substr(0, eq)) == key) return trim(line.substr(eq + 1));
    }
  }
  return "";
}

}  // namespace

MachineUpstreams machine_upstreams(const std::string& root) {
  MachineUpstreams m;
  m.npm = setting({root + "/root/.npmrc", root + "/etc/npmrc", root + "/usr/etc/npmrc"}, "registry");
  m.pypi = setting({root + "/etc/pip.conf", root + "/etc/xdg/pip/pip.conf", root + "/root/.config/pip/pip.conf"},
                   "index-url");
  // apt: one-line .list entries and deb822 .sources stanzas; the first deb archive wins.
  std::vector<std::string> files{root + "/etc/apt/sources.list"};
  std::error_code ec;
  std::vector<std::string> parts;
  for (const auto& e : std::filesystem::directory_iterator(root + "/etc/apt/sources.list.d", ec)) parts.push_back(e.path());
  std::sort(parts.begin(), parts.end());
  files.insert(files.end(), parts.begin(), parts.end());
  for (const auto& path : files) {
    if (!path.ends_with(".list") && !path.ends_with(".sources")) continue;
    std::ifstream in(path);
    std::stringstream all;
    all << in.rdbuf();
    std::string text = all.str();
    if (path.ends_with(".list")) {
      std::istringstream lines(text);
      std::string line;
      while (std::getline(lines, line)) {
        std::istringstream words(line);
        std::string type, word, uri;
        words >> type;
        if (type != "deb") continue;
        while (words >> word) {
          if (word.starts_with("[")) {
            while (!word.ends_with("]") && words >> word) {}
            continue;
          }
          uri = word;
          break;
        }
        std::string suite_and_components, w;
        while (words >> w) suite_and_components += (suite_and_components.empty() ? "" : " ") + w;
        if (uri.empty()) continue;
        if (m.debian.empty()) m.debian = https(uri);
        if (https(uri) == m.debian) m.debian_suites.push_back(suite_and_components);
      }
    } else {
      std::istringstream stanzas(text);
      std::string line;
      std::map<std::string, std::string> fields;
      auto flush = [&] {
        std::istringstream types(fields["Types"]), uris(fields["URIs"]);
        std::string t, uri;
        bool deb = false;
        while (types >> t) deb |= t == "deb";
        uris >> uri;
        if (deb && !uri.empty() && fields["Enabled"] != "no") {
          if (m.debian.empty()) m.debian = https(uri);
          if (https(uri) == m.debian) {
            std::istringstream suites(fields["Suites"]);
            std::string s;
            while (suites >> s) m.debian_suites.push_back(s + " " + fields["Components"]);
          }
        }
        fields.clear();
      };
      while (std::getline(stanzas, line)) {
        if (trim(line).empty()) {
          flush();
          continue;
        }
        if (line[0] == '#') continue;
        auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        fields[trim(line.substr(0, colon))] = trim(line.substr(colon + 1));
      }
      flush();
    }
  }
  return m;
}

Result<PackageRequest> parse_package_request(const JsonFields& f) {
  if (auto ok = f.only({"mode", "registries", "allow", "deny", "lock", "min_age_days", "max_download_mb"}); !ok)
    return std::unexpected(ok.error());
  PackageRequest r;
  auto mode = f.string("mode");
  if (!mode) return std::unexpected(mode.error());
  if (*mode) {
    r.mode = package_mode_named(**mode);
    if (!r.mode) return std::unexpected(f.invalid("mode", "must be `off`, `offline` or `gateway`"));
  }
  if (f.raw().contains("registries")) {
    auto regs = registries_of(f, "registries");
    if (!regs) return std::unexpected(regs.error());
    r.registries = *regs;
  }
  for (auto [key, out] : {std::pair{"allow", &r.allow}, std::pair{"deny", &r.deny}}) {
    auto list = f.string_array(key);
    if (!list) return std::unexpected(list.error());
    if (*list) *out = **list;
  }
  auto lock = f.string_map("lock");
  if (!lock) return std::unexpected(lock.error());
  if (*lock) r.lock = **lock;
  auto age = f.integer("min_age_days");
  if (!age) return std::unexpected(age.error());
  if (*age) {
    if (**age < 0 || **age > 3650) return std::unexpected(f.invalid("min_age_days", "must be 0..3650"));
    r.min_age_days = **age;
  }
  auto cap = f.integer("max_download_mb");
  if (!cap) return std::unexpected(cap.error());
  if (*cap) {
    if (**cap < 1 || **cap > (1 << 24)) return std::unexpected(f.invalid("max_download_mb", "must be 1..16777216"));
    r.max_download_mb = static_cast<uint64_t>(**cap);
  }
  return r;
}

Result<PackagesConfig> parse_packages_config(const JsonFields* s, const std::string& state_dir) {
  PackagesConfig c;
  if (!state_dir.empty()) c.gateway.cache_dir = state_dir + "/packages";
  c.ceiling.mode = PackageMode::gateway;
  c.ceiling.max_download_bytes = 1024ull << 20;
  c.ceiling.max_package_bytes = 256ull << 20;
  MachineUpstreams machine = machine_upstreams();
  c.gateway.pypi = https(machine.pypi);
  c.gateway.npm = https(machine.npm);
  c.gateway.debian = machine.debian;
  c.debian_suites = machine.debian_suites;
  if (!s) return c;
  const std::string where = "config: ";
  if (auto ok = s->only({"mode", "upstreams", "ca_file", "cache_dir", "registries", "allow", "deny", "min_age_days",
                         "max_download_mb", "max_package_mb", "threads", "debian_suites", "debian_keyring"});
      !ok)
    return in(where, ok.error());
  auto mode = s->string("mode");
  if (!mode) return in(where, mode.error());
  if (*mode) {
    auto m = package_mode_named(**mode);
    if (!m) return in(where, s->invalid("mode", "must be `off`, `offline` or `gateway`"));
    c.ceiling.mode = *m;
  }
  auto ups = s->object("upstreams");
  if (!ups) return in(where, ups.error());
  if (*ups) {
    const JsonFields& u = **ups;
    if (auto ok = u.only({"pypi", "npm", "debian"}); !ok) return in(where, ok.error());
    for (auto [key, out] : {std::pair{"pypi", &c.gateway.pypi}, std::pair{"npm", &c.gateway.npm},
                            std::pair{"debian", &c.gateway.debian}}) {
      auto v = u.string(key);
      if (!v) return in(where, v.error());
      if (*v) *out = **v;
    }
  }
  auto suites = s->string_array("debian_suites");
  if (!suites) return in(where, suites.error());
  if (*suites) c.debian_suites = **suites;
  for (auto [key, out] : {std::pair{"ca_file", &c.gateway.ca_file}, std::pair{"cache_dir", &c.gateway.cache_dir},
                          std::pair{"debian_keyring", &c.debian_keyring}}) {
    auto v = s->string(key);
    if (!v) return in(where, v.error());
    if (*v) *out = **v;
  }
  if (s->raw().contains("registries")) {
    auto regs = registries_of(*s, "registries");
    if (!regs) return in(where, regs.error());
    c.ceiling.registries = *regs;
  }
  for (auto [key, out] : {std::pair{"allow", &c.ceiling.allow}, std::pair{"deny", &c.ceiling.deny}}) {
    auto list = s->string_array(key);
    if (!list) return in(where, list.error());
    if (*list)
      for (const auto& text : **list) {
        auto rule = parse_package_rule(text);
        if (!rule) return in(where + "packages." + key + ": ", rule.error());
        out->push_back(*rule);
      }
  }
  auto integer = [&](std::string_view key, int64_t lo, int64_t hi) -> Result<std::optional<int64_t>> {
    auto v = s->integer(key);
    if (!v) return in(where, v.error());
    if (*v && (**v < lo || **v > hi))
      return in(where, s->invalid(key, "must be " + std::to_string(lo) + ".." + std::to_string(hi)));
    return *v;
  };
  auto age = integer("min_age_days", 0, 3650);
  if (!age) return std::unexpected(age.error());
  if (*age) c.ceiling.min_age_days = **age;
  auto dl = integer("max_download_mb", 0, 1 << 24);
  if (!dl) return std::unexpected(dl.error());
  if (*dl) c.ceiling.max_download_bytes = static_cast<uint64_t>(**dl) << 20;
  auto pk = integer("max_package_mb", 0, 1 << 20);
  if (!pk) return std::unexpected(pk.error());
  if (*pk) c.ceiling.max_package_bytes = static_cast<uint64_t>(**pk) << 20;
  auto th = integer("threads", 1, 64);
  if (!th) return std::unexpected(th.error());
  if (*th) c.gateway.threads = static_cast<int>(**th);
  return c;
}

}  // namespace cela::net
