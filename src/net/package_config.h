// The `packages` section of the daemon config (docs/operations.md) and the `packages`
// object of a create request (API.md), read with the strict JSON reader; and the
// upstreams a machine already uses when the config names none.
#pragma once

#include <string>

#include "common/error.h"
#include "common/json_fields.h"
#include "net/package_gateway.h"
#include "net/package_policy.h"

namespace cela::net {

struct PackagesConfig {
  GatewayConfig gateway;  // upstreams, ca_file, cache_dir, threads
  PackagePolicy ceiling;  // every tenant's: mode, registries, allow, deny, cooldown, caps
  // The suites a session's apt sources name ("bookworm main"); default: the machine's
  // own, for the archive they name.
  std::vector<std::string> debian_suites;
  // An extra keyring apt inside trusts for the gateway's archive ("" = the template's
  // keys), for archives signed by a key the template does not ship.
  std::string debian_keyring;
};

// `state_dir` places the default cache (<state_dir>/packages; "" leaves it unset). Upstreams not named
// are taken from the machine (machine_upstreams()).
Result<PackagesConfig> parse_packages_config(const JsonFields* section, const std::string& state_dir);
Result<PackageRequest> parse_package_request(const JsonFields& f);

// What this machine's own tools use, "" when nothing is set: the first `deb` archive
// of the apt sources (as https), npm's `registry` (npmrc), pip's `index-url` (pip.conf).
// `root` prefixes every path read (tests).
struct MachineUpstreams {
  std::string pypi, npm, debian;
  std::vector<std::string> debian_suites;  // "bookworm main", for the session's sources
};
MachineUpstreams machine_upstreams(const std::string& root = "");

}  // namespace cela::net
