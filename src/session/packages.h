// A session's side of the package gateway: what its create asked for, narrowed to the
// tenant's ceiling (net/package_policy.h), and how its package managers are pointed at
// the gateway: environment variables and the files pip, npm and apt read (also under
// sudo, which drops most of the environment). Every client reaches the gateway as
// http://packages.cela.internal/… through the session's 127.0.0.1:3128 door.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "net/package_config.h"
#include "net/package_policy.h"
#include "runtime/runtime.h"

namespace cela::session {

// The directory apt reads for source parts instead of the template's sources.list.d.
inline constexpr std::string_view kPackageSourceParts = "/etc/apt/cela-sources.d";

// The create body's `packages` object (the API parses with it).
using net::parse_package_request;

// "K=V" entries: PIP_INDEX_URL, PIP_TRUSTED_HOST, PIP_PROXY, npm_config_registry, ….
std::vector<std::string> package_env();

// The files written into the session's root (as the sandbox's root user): path -> text.
struct PackageFile {
  std::string path, text;
  uint32_t mode = 0644;
};
std::vector<PackageFile> package_files(const net::PackagesConfig& config, const std::string& keyring_bytes);

// Writes them into a started instance (its writable layer), before the session is
// handed out. keyring: the bytes of `packages.debian_keyring` ("" when none).
Result<void> write_package_files(runtime::Instance& instance, const net::PackagesConfig& config,
                                 const std::string& keyring_bytes);

}  // namespace cela::session
