// PackageGateway: governed package installs (API.md "Packages", docs/security.md
// "Packages"). An InternalService for the reserved host packages.cela.internal: the
// egress proxy hands it the plain-HTTP requests a session sends through its
// 127.0.0.1:3128 door. It speaks
//   /pypi/simple/<project>/      PyPI's simple API (PEP 503 HTML, PEP 691 JSON) for pip
//   /pypi/files/<project>/<file> the files that index links to
//   /npm/<name>, /npm/<name>/-/<file>.tgz  the npm registry protocol (packuments, tarballs)
//   /debian/<path>               a Debian archive for apt (dists/ metadata, pool/ debs)
// and fetches from the operator's upstreams over TLS (gateway_upstream.h). Every file
// it serves passes the session's policy (package_policy.h), is checked against the
// hashes the registry publishes (and the lock), comes from the content-addressed cache
// (blob_cache.h) when it holds it, and is recorded (InstallRecorder). A session in mode
// `off` (or unknown to the gateway) gets 403 "package installs are disabled by
// policy" at once; `offline` is served from the cache only.
//
// Threads: handle() only posts to the gateway's own worker pool, where the upstream
// fetches run; a session has at most kPerSessionInFlight requests on it, so one
// session cannot starve the others' installs.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "common/error.h"
#include "net/internal_service.h"
#include "net/package_policy.h"

namespace cela::net {

class BlobCache;
class UpstreamClient;

inline constexpr std::string_view kPackagesHost = "packages.cela.internal";

struct GatewayConfig {
  // Upstream base URLs (https): the PyPI simple index ("…/simple/"), the npm registry
  // ("…/"), the Debian archive root ("…/debian"). "" = that registry is not served.
  std::string pypi, npm, debian;
  std::string ca_file;    // extra CA certificates for the upstreams
  std::string cache_dir;  // the content-addressed cache
  int threads = 4;
};

// One install attempt (one file asked for, or a package refused by name).
struct InstallEvent {
  std::string session_id, tenant_id;
  std::string at;  // RFC 3339
  std::string manager, name, version, registry, sha256;
  uint64_t size = 0;
  std::string verdict;  // "allowed", "denied", "failed"
  std::string rule, reason;
  bool cache_hit = false;
};
using InstallRecorder = std::function<void(const InstallEvent&)>;

// A gateway answer before it becomes an HTTP message: a body, or a file to send.
struct GatewayAnswer {
  unsigned status = 200;
  std::string reason;  // status line phrase; clients print it (pip, apt)
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::string file;  // when set, its bytes are the body
};

class PackageGateway : public InternalService {
 public:
  static constexpr int kPerSessionInFlight = 8;

  static Result<std::unique_ptr<PackageGateway>> open(const GatewayConfig& config, InstallRecorder recorder);
  ~PackageGateway() override;

  std::string host() const override { return std::string(kPackagesHost); }
  void handle(const DoorPeer& peer, HttpRequest request, Reply reply) override;

  // The session's policy, from its create until its end (unknown sessions are `off`).
  void add_session(const std::string& session_id, const std::string& tenant_id, PackagePolicy policy);
  void remove_session(const std::string& session_id);

  // The same as handle(), synchronously on the caller's thread (tests, harnesses).
  GatewayAnswer serve(const DoorPeer& peer, const HttpRequest& request);
  static boost::beast::http::message_generator to_message(GatewayAnswer answer, unsigned version, bool keep_alive);

  uint64_t cache_hits() const;
  uint64_t cache_misses() const;
  const GatewayConfig& config() const { return config_; }

  struct Impl;

 private:
  PackageGateway(GatewayConfig config, InstallRecorder recorder);
  GatewayConfig config_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cela::net
