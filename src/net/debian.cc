// The gateway's Debian front-end: an archive for apt. dists/ (InRelease, Release,
// Packages indexes, by-hash) is relayed unchanged, so apt still verifies the
// archive's signature with the keys the template trusts, and kept for offline mode.
// pool/ files are packages: each passes the policy by the name and version in its
// file name (name_version_arch.deb), the lock, the caps and the cache; the gateway
// remembers each pool path's sha256 (pool files never change in a Debian archive),
// so a second session, or an offline one, is served from the cache. The bytes are
// checked by apt against the signed Packages index; the gateway adds the lock's check.
#include "net/gateway_internal.h"

namespace cela::net {

GatewayAnswer serve_debian(GatewayCore& core, GatewayRequest& r) {
  std::string base = core.config().debian;
  while (base.ends_with('/')) base.pop_back();
  const std::string& path = r.path;
  if (path.starts_with("dists/")) {
    auto meta = core.metadata(r, "debian:" + path, base + "/" + path, "");
    if (!meta) return meta.error();
    GatewayAnswer a;
    a.content_type = "application/octet-stream";
    a.file = meta->path;
    return a;
  }
  if (!path.starts_with("pool/") || path.ends_with('/'))
    return GatewayCore::refuse(404, "the Debian gateway serves dists/ and pool/");
  std::string file = path.substr(path.rfind('/') + 1);
  FileWant want;
  want.registry = Registry::debian;
  auto first = file.find('_');
  if (first == std::string::npos) return GatewayCore::refuse(404, "not a Debian package file: " + file);
  want.name = file.substr(0, first);
  auto second = file.find('_', first + 1);
  if (second == std::string::npos) second = file.rfind('.');
  want.version = file.substr(first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
  want.filename = file;
  want.url = base + "/" + path;
  want.content_type = file.ends_with(".deb") ? "application/vnd.debian.binary-package" : "application/octet-stream";
  want.note_key = "debian:" + path;
  return core.deliver(r, want);
}

}  // namespace cela::net
