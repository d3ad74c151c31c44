// The `base` template build (build_base_template in template.h), and the pieces of it
// that are plain logic, declared here so unit tests can reach them.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "rootfs/template.h"

namespace cela::rootfs {

// Installed with apt-get on top of debootstrap's minbase, sorted.
const std::vector<std::string>& base_packages();

// sha256 hex over what decides the layer's content: the build's recipe version, the
// suite, the sorted package list and the in-chroot setup script. Not the mirror: any
// mirror of the suite serves the same packages.
std::string base_recipe(const std::string& suite, std::vector<std::string> packages);

// The Debian mirror the machine's apt uses for `suite` (an exact suite name, so
// "bookworm" does not match "bookworm-security"): first deb822 stanzas in
// <apt_dir>/sources.list.d/*.sources (Types: deb, URIs:, Suites:, Enabled:), then
// one-line "deb [opts] URI SUITE COMPONENTS" entries in <apt_dir>/sources.list and
// <apt_dir>/sources.list.d/*.list. not_found when nothing matches.
Result<std::string> debian_mirror_from_apt(const std::string& apt_dir, const std::string& suite);

// options.mirror, else $CELA_DEBIAN_MIRROR, else debian_mirror_from_apt("/etc/apt", ...).
Result<std::string> resolve_debian_mirror(const BaseBuildOptions& options);

// "name=version" of every package a dpkg status file lists as "install ok installed",
// sorted.
Result<std::vector<std::string>> installed_packages(const std::string& dpkg_status_path);

}  // namespace cela::rootfs
