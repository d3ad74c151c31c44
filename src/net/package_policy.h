// Package policy: which package versions a session may install through the gateway
// (API.md "Packages"). Pure logic, no I/O: modes, registries, allow/deny rules with
// name globs and version ranges (deny wins), the lock (name==version -> sha256), the
// release cooldown and the size caps. A session's policy is its create request
// narrowed by the tenant's ceiling (the daemon's `packages` config): both must allow.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cela::net {

enum class PackageMode { off, offline, gateway };  // ordered: a session may ask for less
enum class Registry { pypi, npm, debian };

std::string_view to_string(PackageMode mode);
std::string_view to_string(Registry registry);
std::optional<PackageMode> package_mode_named(std::string_view name);
std::optional<Registry> registry_named(std::string_view name);

// PEP 503 normalisation for PyPI names (lower case, runs of -_. become -); other
// registries' names are kept as they are.
std::string normalize_name(Registry registry, std::string_view name);

// Compares two version strings: numeric runs numerically, letter runs as text, a
// letter run after a number (a pre-release: 1.0rc1, 1.0.0-beta) sorting before the
// release. <0, 0, >0.
int compare_versions(std::string_view a, std::string_view b);

// Whether `version` is in `range`. Ranges: "" or "*" (any); comparators joined by ','
// or ' ' (all must hold) and alternatives joined by "||": ==X, =X, X (X may end in
// .* or .x: a prefix), !=X, >=X, <=X, >X, <X, ~=X (PEP 440 compatible release), ^X and
// ~X (npm caret and tilde).
bool version_in_range(std::string_view range, std::string_view version);

// "pypi:requests==2.*", "npm:lodash@^4", "npm:@types/node@>=18", "debian:curl=7.*",
// "npm:event-stream" (every version). Names are globs (fnmatch).
struct PackageRule {
  Registry registry = Registry::pypi;
  std::string name;      // glob, normalised
  std::string versions;  // range, "" = any
  std::string text;      // as written, for records
  bool matches(Registry r, std::string_view normalized_name, std::string_view version) const;
};
Result<PackageRule> parse_package_rule(std::string_view text);

// A lock entry: "pypi:requests==2.32.3" -> "sha256:<64 hex>" (an exact version).
struct LockEntry {
  Registry registry = Registry::pypi;
  std::string name, version, sha256;  // sha256 lower-case hex, no prefix
  std::string text;
};
Result<LockEntry> parse_lock_entry(std::string_view key, std::string_view value);

struct PackagePolicy {
  PackageMode mode = PackageMode::off;
  std::vector<Registry> registries{Registry::pypi, Registry::npm, Registry::debian};
  std::vector<PackageRule> allow;          // the session's; empty = every package
  std::vector<PackageRule> ceiling_allow;  // the tenant's; empty = every package
  std::vector<PackageRule> deny;           // both; any match refuses
  std::vector<LockEntry> lock;             // non-empty: only these versions, these bytes
  int64_t min_age_days = 0;
  uint64_t max_download_bytes = 0;  // per session, 0 = unlimited
  uint64_t max_package_bytes = 0;   // per file, 0 = unlimited
};

// What a create request asks for (API.md "packages"), before narrowing.
struct PackageRequest {
  std::optional<PackageMode> mode;
  std::optional<std::vector<Registry>> registries;
  std::vector<std::string> allow, deny;
  std::map<std::string, std::string> lock;
  std::optional<int64_t> min_age_days;
  std::optional<uint64_t> max_download_mb;
};

// The session's policy: `asked` within `ceiling`. Asking for a stronger mode, a
// registry outside the ceiling, a shorter cooldown or a larger cap is policy_denied;
// malformed rules are invalid_argument naming them.
Result<PackagePolicy> narrow_policy(const PackagePolicy& ceiling, const PackageRequest& asked);

struct Decision {
  bool allowed = false;
  std::string rule;    // what decided: "allow pypi:requests==2.*", "deny npm:x", "lock", "min_age_days 2"
  std::string reason;  // one line for a refusal, "" when allowed
  std::optional<std::string> locked_sha256;  // the bytes must hash to this
};

// One version of one package. published_ms: when the registry says it was
// published (nullopt: unknown, which a cooldown refuses; Debian packages have no
// publish time and no cooldown).
Decision decide(const PackagePolicy& policy, Registry registry, std::string_view name, std::string_view version,
                std::optional<int64_t> published_ms, int64_t now_ms);

// A registry-level decision (before any name is known): mode and registries.
Decision decide_registry(const PackagePolicy& policy, Registry registry);

}  // namespace cela::net
