// What the gateway's registry front-ends (pypi.cc, npm.cc, debian.cc) share with its
// core (package_gateway.cc): the session's state, metadata fetches (upstream or
// cache, by mode) and file delivery (policy, hashes, lock, caps, cache, record).
// Internal to src/net.
#pragma once

#include <expected>
#include <mutex>
#include <optional>
#include <string>

#include "net/blob_cache.h"
#include "net/gateway_upstream.h"
#include "net/package_gateway.h"

namespace cela::net {

struct GatewaySession {
  std::string id, tenant_id;
  PackagePolicy policy;
  std::mutex mu;  // guards the counters below
  uint64_t downloaded = 0;
  int in_flight = 0;
};

// One request as a front-end sees it: the path below its prefix ("simple/requests/").
struct GatewayRequest {
  GatewaySession& session;
  std::string path;
  std::string host;    // the Host header: absolute links the client follows back to us
  std::string accept;
};

// A file a client asked for, as the registry's metadata describes it.
struct FileWant {
  Registry registry = Registry::pypi;
  std::string name, version, filename;
  std::string url;  // upstream
  std::optional<std::string> sha256;         // what the registry publishes
  std::optional<std::string> sha512_base64;  // npm `integrity`
  std::optional<std::string> sha1_hex;       // npm `shasum`
  std::optional<int64_t> published_ms;
  std::string content_type = "application/octet-stream";
  std::string note_key;  // when set: remember key -> sha256 (files the metadata names without a hash)
};

struct Metadata {
  std::string path;  // the body, in the cache
  std::string content_type;
  std::string final_url;  // where it came from (relative links resolve against it)
};

class GatewayCore {
 public:
  GatewayCore(const GatewayConfig& config, UpstreamClient& upstream, BlobCache& cache, InstallRecorder recorder)
      : config_(config), upstream_(upstream), cache_(cache), recorder_(std::move(recorder)) {}

  static GatewayAnswer refuse(unsigned status, const std::string& message);
  // Mode, registry and an upstream for it.
  Decision registry_decision(const GatewaySession& s, Registry registry) const;
  // The same, as an answer (recorded) when refused.
  std::optional<GatewayAnswer> check_registry(GatewayRequest& r, Registry registry);
  // gateway: upstream (kept in the cache for offline), falling back to the cache when
  // the upstream cannot be reached; offline: the cache only.
  // fresh_s > 0: a cached copy younger than that is used without asking upstream.
  std::expected<Metadata, GatewayAnswer> metadata(GatewayRequest& r, const std::string& key, const std::string& url,
                                                  const std::string& accept, int fresh_s = 0);
  // Policy, lock, caps, cache or upstream, verification, record.
  GatewayAnswer deliver(GatewayRequest& r, const FileWant& want);
  // A refusal by name (no file involved), recorded.
  GatewayAnswer refuse_package(GatewayRequest& r, Registry registry, const std::string& name, const std::string& version,
                               const Decision& d, unsigned status = 403);
  void record(GatewayRequest& r, InstallEvent e);
  const GatewayConfig& config() const { return config_; }
  std::string registry_origin(Registry registry) const;

 private:
  const GatewayConfig& config_;
  UpstreamClient& upstream_;
  BlobCache& cache_;
  InstallRecorder recorder_;
};

GatewayAnswer serve_pypi(GatewayCore& core, GatewayRequest& r);
GatewayAnswer serve_npm(GatewayCore& core, GatewayRequest& r);
GatewayAnswer serve_debian(GatewayCore& core, GatewayRequest& r);

// Reads a small file whole ("" when it cannot).
std::string slurp(const std::string& path);

}  // namespace cela::net
