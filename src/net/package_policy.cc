// Package policy matching (package_policy.h).
#include "net/package_policy.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>

namespace cela::net {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_alpha(char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
  return s;
}

// The version's tokens: numbers and letter runs; separators dropped.
struct Token {
  bool number = false;
  uint64_t value = 0;
  std::string text;
};
std::vector<Token> tokens(std::string_view v) {
  std::vector<Token> out;
  size_t i = 0;
  if (!v.empty() && (v[0] == 'v' || v[0] == 'V') && v.size() > 1 && is_digit(v[1])) i = 1;
  while (i < v.size()) {
    if (is_digit(v[i])) {
      Token t{true, 0, {}};
      while (i < v.size() && is_digit(v[i])) t.value = t.value * 10 + static_cast<uint64_t>(v[i++] - '0');
      out.push_back(t);
    } else if (is_alpha(v[i])) {
      Token t;
      while (i < v.size() && is_alpha(v[i])) t.text += static_cast<char>(std::tolower(static_cast<unsigned char>(v[i++])));
      out.push_back(t);
    } else {
      ++i;
    }
  }
  return out;
}

// The release part of a version: its leading numbers ("1.2.3rc1" -> 1, 2, 3).
std::vector<uint64_t> release(std::string_view v) {
  std::vector<uint64_t> out;
  for (const auto& t : tokens(v)) {
    if (!t.number) break;
    out.push_back(t.value);
  }
  return out;
}

bool has_prefix(std::string_view version, std::string_view prefix) {
  // "2" matches "2", "2.1", "2.1.3" but not "20".
  auto want = release(prefix);
  auto have = release(version);
  if (have.size() < want.size()) return false;
  return std::equal(want.begin(), want.end(), have.begin());
}

// One comparator: "==2.*", ">=1.0", "^4", "4.x", "~=2.1".
bool comparator_holds(std::string_view c, std::string_view v) {
  c = trim(c);
  if (c.empty() || c == "*" || c == "x" || c == "X") return true;
  auto op_len = [&](std::initializer_list<std::string_view> ops) -> std::string_view {
    for (auto op : ops)
      if (c.starts_with(op)) return op;
    return {};
  };
  std::string_view op = op_len({"===", "==", "!=", ">=", "<=", "~=", ">", "<", "=", "^", "~"});
  std::string_view x = trim(c.substr(op.size()));
  bool wildcard = x.ends_with(".*") || x.ends_with(".x") || x.ends_with(".X") || x == "*";
  std::string_view base = x;
  while (base.ends_with(".*") || base.ends_with(".x") || base.ends_with(".X")) base.remove_suffix(2);
  if (op.empty() || op == "=" || op == "==" || op == "===") {
    if (wildcard) return base == "*" || has_prefix(v, base);
    // npm's bare "4" or "4.17" is the x-range 4.x / 4.17.x.
    bool partial = op.empty() && x.find_first_not_of("0123456789.") == std::string_view::npos && release(x).size() < 3;
    if (partial) return has_prefix(v, x);
    return compare_versions(v, x) == 0;
  }
  if (op == "!=") return wildcard ? !has_prefix(v, base) : compare_versions(v, x) != 0;
  int cmp = compare_versions(v, x);
  if (op == ">=") return cmp >= 0;
  if (op == "<=") return cmp <= 0;
  if (op == ">") return cmp > 0;
  if (op == "<") return cmp < 0;
  auto r = release(x);
  if (r.empty()) return false;
  if (op == "~=") {  // >= x and == x without its last number, .*
    if (r.size() < 2 || cmp < 0) return false;
    auto have = release(v);
    return have.size() >= r.size() - 1 && std::equal(r.begin(), r.end() - 1, have.begin());
  }
  if (cmp < 0) return false;
  auto have = release(v);
  have.resize(std::max<size_t>(have.size(), 3), 0);
  r.resize(std::max<size_t>(r.size(), 3), 0);
  if (op == "^") {  // the leftmost non-zero number stays
    size_t keep = 0;
    while (keep < 2 && r[keep] == 0) ++keep;
    return std::equal(r.begin(), r.begin() + static_cast<long>(keep) + 1, have.begin());
  }
  // "~": the major and minor stay (just the major for "~1").
  size_t given = release(x).size();
  size_t keep = given >= 2 ? 2 : 1;
  return std::equal(r.begin(), r.begin() + static_cast<long>(keep), have.begin());
}

bool conjunction_holds(std::string_view range, std::string_view v) {
  // Split on ',' and on spaces that separate comparators (">= 1.0" keeps its space).
  std::vector<std::string> parts;
  std::string cur;
  for (size_t i = 0; i < range.size(); ++i) {
    char ch = range[i];
    if (ch == ',') {
      parts.push_back(cur);
      cur.clear();
    } else if (ch == ' ') {
      bool after_op = !cur.empty() && std::string_view("=<>!~^").find(cur.back()) != std::string_view::npos;
      if (!after_op && !cur.empty()) {
        parts.push_back(cur);
        cur.clear();
      }
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  for (const auto& p : parts)
    if (!comparator_holds(p, v)) return false;
  return true;
}

bool glob_match(const std::string& glob, std::string_view name) {
  return ::fnmatch(glob.c_str(), std::string(name).c_str(), 0) == 0;
}

// Splits "name<versions>" by registry: pypi at the first of =<>!~, npm at an '@'
// past the first character, debian at '='.
std::pair<std::string_view, std::string_view> split_spec(Registry r, std::string_view spec) {
  size_t at = std::string_view::npos;
  if (r == Registry::npm) {
    at = spec.find('@', 1);
    if (at == std::string_view::npos) return {spec, {}};
    return {spec.substr(0, at), spec.substr(at + 1)};
  }
  at = r == Registry::pypi ? spec.find_first_of("=<>!~ ") : spec.find_first_of("=<> ");
  if (at == std::string_view::npos) return {spec, {}};
  return {trim(spec.substr(0, at)), trim(spec.substr(at))};
}

Result<std::pair<Registry, std::string_view>> split_registry(std::string_view text) {
  auto colon = text.find(':');
  if (colon == std::string_view::npos)
    return fail(ErrorCode::invalid_argument, "package rule `" + std::string(text) + "` must start with pypi:, npm: or debian:");
  auto r = registry_named(text.substr(0, colon));
  if (!r)
    return fail(ErrorCode::invalid_argument, "package rule `" + std::string(text) + "`: unknown registry `" +
                                                 std::string(text.substr(0, colon)) + "` (pypi, npm, debian)");
  return std::pair{*r, text.substr(colon + 1)};
}

bool rules_match(const std::vector<PackageRule>& rules, Registry r, std::string_view name, std::string_view version,
                 std::string* which) {
  for (const auto& rule : rules)
    if (rule.matches(r, name, version)) {
      if (which) *which = rule.text;
      return true;
    }
  return false;
}

}  // namespace

std::string_view to_string(PackageMode mode) {
  switch (mode) {
    case PackageMode::off: return "off";
    case PackageMode::offline: return "offline";
    case PackageMode::gateway: return "gateway";
  }
  return "off";
}

std::string_view to_string(Registry registry) {
  switch (registry) {
    case Registry::pypi: return "pypi";
    case Registry::npm: return "npm";
    case Registry::debian: return "debian";
  }
  return "pypi";
}

std::optional<PackageMode> package_mode_named(std::string_view name) {
  for (auto m : {PackageMode::off, PackageMode::offline, PackageMode::gateway})
    if (to_string(m) == name) return m;
  return std::nullopt;
}

std::optional<Registry> registry_named(std::string_view name) {
  for (auto r : {Registry::pypi, Registry::npm, Registry::debian})
    if (to_string(r) == name) return r;
  return std::nullopt;
}

std::string normalize_name(Registry registry, std::string_view name) {
  if (registry != Registry::pypi) return std::string(name);
  std::string out;
  bool sep = false;
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      sep = true;
      continue;
    }
    if (sep && !out.empty()) out += '-';
    sep = false;
    out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

int compare_versions(std::string_view a, std::string_view b) {
  auto ta = tokens(a), tb = tokens(b);
  size_t n = std::max(ta.size(), tb.size());
  for (size_t i = 0; i < n; ++i) {
    // 1.0 == 1.0.0 < 1.0.1; 1.0rc1 < 1.0 < 1.0.post1
    auto rest = [](const Token& t) { return t.number ? (t.value == 0 ? 0 : 1) : (t.text == "post" ? 1 : -1); };
    if (i >= ta.size()) {
      if (int r = rest(tb[i])) return -r;
      continue;
    }
    if (i >= tb.size()) {
      if (int r = rest(ta[i])) return r;
      continue;
    }
    const Token &x = ta[i], &y = tb[i];
    if (x.number && y.number) {
      if (x.value != y.value) return x.value < y.value ? -1 : 1;
    } else if (x.number != y.number) {
      return x.number ? 1 : -1;  // 1.0.1 > 1.0rc1
    } else if (x.text != y.text) {
      // post releases sort after, everything else (dev, a, b, rc, alpha, beta) before
      bool xp = x.text == "post", yp = y.text == "post";
      if (xp != yp) return xp ? 1 : -1;
      return x.text < y.text ? -1 : 1;
    }
  }
  return 0;
}

bool version_in_range(std::string_view range, std::string_view version) {
  range = trim(range);
  if (range.empty()) return true;
  size_t start = 0;
  while (true) {
    size_t bar = range.find("||", start);
    std::string_view alt = range.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start);
    if (conjunction_holds(trim(alt), version)) return true;
    if (bar == std::string_view::npos) return false;
    start = bar + 2;
  }
}

bool PackageRule::matches(Registry r, std::string_view normalized_name, std::string_view version) const {
  if (r != registry || !glob_match(name, normalized_name)) return false;
  if (versions.empty()) return true;
  if (version.empty()) return true;  // a name-level question: some version may match
  return version_in_range(versions, version);
}

Result<PackageRule> parse_package_rule(std::string_view text) {
  auto split = split_registry(text);
  if (!split) return std::unexpected(split.error());
  auto [name, versions] = split_spec(split->first, split->second);
  if (name.empty()) return fail(ErrorCode::invalid_argument, "package rule `" + std::string(text) + "` names no package");
  PackageRule rule;
  rule.registry = split->first;
  rule.name = normalize_name(rule.registry, name);
  rule.versions = std::string(versions);
  rule.text = std::string(text);
  return rule;
}

Result<LockEntry> parse_lock_entry(std::string_view key, std::string_view value) {
  auto split = split_registry(key);
  if (!split) return std::unexpected(split.error());
  auto [name, versions] = split_spec(split->first, split->second);
  std::string_view v = versions;
  for (std::string_view op : {"===", "==", "="})
    if (v.starts_with(op)) {
      v.remove_prefix(op.size());
      break;
    }
  v = trim(v);
  bool exact = !v.empty() && v.find_first_of("*<>!~^| ,") == std::string_view::npos;
  if (name.empty() || !exact)
    return fail(ErrorCode::invalid_argument,
                "lock entry `" + std::string(key) + "` must name one exact version (pypi:NAME==V, npm:NAME@V, debian:NAME=V)");
  std::string_view hash = value;
  if (hash.starts_with("sha256:")) hash.remove_prefix(7);
  bool hex = hash.size() == 64 && hash.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  if (!hex)
    return fail(ErrorCode::invalid_argument,
                "lock entry `" + std::string(key) + "` must map to \"sha256:<64 lower-case hex>\"");
  LockEntry e;
  e.registry = split->first;
  e.name = normalize_name(e.registry, name);
  e.version = std::string(v);
  e.sha256 = std::string(hash);
  e.text = std::string(key);
  return e;
}

Result<PackagePolicy> narrow_policy(const PackagePolicy& ceiling, const PackageRequest& asked) {
  PackagePolicy p = ceiling;
  p.ceiling_allow = ceiling.allow;
  p.allow.clear();
  p.lock.clear();
  p.mode = asked.mode.value_or(PackageMode::off);
  if (p.mode > ceiling.mode)
    return fail(ErrorCode::policy_denied, "packages.mode `" + std::string(to_string(p.mode)) +
                                              "` is beyond this tenant's ceiling `" +
                                              std::string(to_string(ceiling.mode)) + "`");
  if (asked.registries) {
    for (auto r : *asked.registries)
      if (std::ranges::find(ceiling.registries, r) == ceiling.registries.end())
        return fail(ErrorCode::policy_denied,
                    "packages.registries: `" + std::string(to_string(r)) + "` is not allowed for this tenant");
    p.registries = *asked.registries;
  }
  for (const auto& text : asked.allow) {
    auto rule = parse_package_rule(text);
    if (!rule) return std::unexpected(Error{rule.error().code, 0, "packages.allow: " + rule.error().context});
    p.allow.push_back(*rule);
  }
  for (const auto& text : asked.deny) {
    auto rule = parse_package_rule(text);
    if (!rule) return std::unexpected(Error{rule.error().code, 0, "packages.deny: " + rule.error().context});
    p.deny.push_back(*rule);
  }
  for (const auto& [key, value] : asked.lock) {
    auto e = parse_lock_entry(key, value);
    if (!e) return std::unexpected(Error{e.error().code, 0, "packages.lock: " + e.error().context});
    p.lock.push_back(*e);
  }
  if (asked.min_age_days) {
    if (*asked.min_age_days < ceiling.min_age_days)
      return fail(ErrorCode::policy_denied, "packages.min_age_days must be at least this tenant's " +
                                                std::to_string(ceiling.min_age_days));
    p.min_age_days = *asked.min_age_days;
  }
  if (asked.max_download_mb) {
    uint64_t bytes = *asked.max_download_mb << 20;
    if (ceiling.max_download_bytes && bytes > ceiling.max_download_bytes)
      return fail(ErrorCode::policy_denied, "packages.max_download_mb is above this tenant's " +
                                                std::to_string(ceiling.max_download_bytes >> 20));
    p.max_download_bytes = bytes;
  }
  return p;
}

Decision decide_registry(const PackagePolicy& policy, Registry registry) {
  Decision d;
  if (policy.mode == PackageMode::off) {
    d.rule = "packages.mode off";
    d.reason = "package installs are disabled by policy (packages.mode off)";
    return d;
  }
  if (std::ranges::find(policy.registries, registry) == policy.registries.end()) {
    d.rule = "registries";
    d.reason = "registry `" + std::string(to_string(registry)) + "` is not allowed by policy (packages.registries)";
    return d;
  }
  d.allowed = true;
  return d;
}

Decision decide(const PackagePolicy& policy, Registry registry, std::string_view raw_name, std::string_view version,
                std::optional<int64_t> published_ms, int64_t now_ms) {
  Decision d = decide_registry(policy, registry);
  if (!d.allowed) return d;
  d.allowed = false;
  std::string name = normalize_name(registry, raw_name);
  std::string what = std::string(to_string(registry)) + ":" + name + (version.empty() ? "" : " " + std::string(version));
  std::string which;
  for (const auto& rule : policy.deny) {
    // A deny rule with versions refuses only those; a name-level question (no version)
    // is refused only by a rule that covers every version.
    if (rule.registry != registry || !glob_match(rule.name, name)) continue;
    if (version.empty() ? rule.versions.empty() : version_in_range(rule.versions, version)) {
      d.rule = "deny " + rule.text;
      d.reason = what + " is denied by policy (deny " + rule.text + ")";
      return d;
    }
  }
  bool locked = false;
  bool has_lock = std::ranges::any_of(policy.lock, [&](const LockEntry& e) { return e.registry == registry; });
  if (has_lock) {
    for (const auto& e : policy.lock) {
      if (e.registry != registry || e.name != name) continue;
      if (version.empty() || compare_versions(e.version, version) == 0) {
        locked = true;
        d.rule = "lock " + e.text;
        if (!version.empty()) d.locked_sha256 = e.sha256;
        break;
      }
    }
    if (!locked) {
      d.rule = "lock";
      d.reason = what + " is not in the session's lock (only locked name==version installs are allowed)";
      return d;
    }
  }
  if (!locked) {
    if (!policy.ceiling_allow.empty() && !rules_match(policy.ceiling_allow, registry, name, version, &which)) {
      d.rule = "tenant allow";
      d.reason = what + " is not allowed by the tenant's package rules (no rule matches)";
      return d;
    }
    if (!policy.allow.empty()) {
      if (!rules_match(policy.allow, registry, name, version, &which)) {
        d.rule = "allow";
        d.reason = what + " is not allowed by the session's package rules (no rule matches)";
        return d;
      }
      d.rule = "allow " + which;
    } else if (!policy.ceiling_allow.empty()) {
      d.rule = "tenant allow " + which;
    } else {
      d.rule = "default";
    }
  }
  // Debian archives publish no per-version times and their indexes are signed (they
  // cannot be filtered): the cooldown applies to pypi and npm.
  if (policy.min_age_days > 0 && !version.empty() && registry != Registry::debian) {
    int64_t min_age_ms = policy.min_age_days * 86'400'000;
    if (!published_ms || now_ms - *published_ms < min_age_ms) {
      d.rule = "min_age_days " + std::to_string(policy.min_age_days);
      d.reason = what + (published_ms ? " was published " + std::to_string((now_ms - *published_ms) / 3'600'000) +
                                            " h ago, within the release cooldown of " +
                                            std::to_string(policy.min_age_days) + " day(s) (min_age_days)"
                                      : " has no publish time, and a release cooldown (min_age_days " +
                                            std::to_string(policy.min_age_days) + ") applies");
      d.locked_sha256.reset();
      return d;
    }
  }
  d.allowed = true;
  return d;
}

}  // namespace cela::net
