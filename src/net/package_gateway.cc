// PackageGateway core (package_gateway.h): sessions, the worker pool, routing to the
// registry front-ends, and GatewayCore's metadata and file delivery.
#include "net/package_gateway.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/http/file_body.hpp>
#include <boost/beast/http/string_body.hpp>

#include "common/time.h"
#include "net/blob_cache.h"
#include "net/gateway_internal.h"
#include "net/gateway_upstream.h"

namespace cela::net {
namespace http = boost::beast::http;

std::string slurp(const std::string& path) {
  std::string out;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[65536];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

namespace {

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

std::string mb(uint64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MiB"; }

}  // namespace

// ---- GatewayCore -----------------------------------------------------------------------

GatewayAnswer GatewayCore::refuse(unsigned status, const std::string& message) {
  GatewayAnswer a;
  a.status = status;
  a.reason = "cela: " + message;
  // pip and apt print the status line, npm the JSON `error`: every client shows why.
  a.content_type = "application/json";
  a.body = "{\"error\":" + std::string("\"") ;
  for (char c : a.reason) {
    if (c == '"' || c == '\\') a.body += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    a.body += c;
  }
  a.body += "\"}\n";
  return a;
}

std::string GatewayCore::registry_origin(Registry registry) const {
  const std::string& base = registry == Registry::pypi ? config_.pypi : registry == Registry::npm ? config_.npm : config_.debian;
  auto u = parse_url(base);
  return u ? u->origin() : base;
}

void GatewayCore::record(GatewayRequest& r, InstallEvent e) {
  e.session_id = r.session.id;
  e.tenant_id = r.session.tenant_id;
  e.at = now_rfc3339();
  if (recorder_) recorder_(e);
}

Decision GatewayCore::registry_decision(const GatewaySession& s, Registry registry) const {
  Decision d = decide_registry(s.policy, registry);
  const std::string& upstream =
      registry == Registry::pypi ? config_.pypi : registry == Registry::npm ? config_.npm : config_.debian;
  if (d.allowed && upstream.empty() && s.policy.mode == PackageMode::gateway) {
    d.allowed = false;
    d.rule = "upstreams";
    d.reason = "no upstream is configured for registry `" + std::string(to_string(registry)) + "` (packages.upstreams)";
  }
  return d;
}

std::optional<GatewayAnswer> GatewayCore::check_registry(GatewayRequest& r, Registry registry) {
  Decision d = registry_decision(r.session, registry);
  if (d.allowed) return std::nullopt;
  return refuse_package(r, registry, "", "", d);
}

GatewayAnswer GatewayCore::refuse_package(GatewayRequest& r, Registry registry, const std::string& name,
                                          const std::string& version, const Decision& d, unsigned status) {
  InstallEvent e;
  e.manager = std::string(to_string(registry));
  e.name = name;
  e.version = version;
  e.registry = registry_origin(registry);
  e.verdict = "denied";
  e.rule = d.rule;
  e.reason = d.reason;
  record(r, e);
  return refuse(status, d.reason);
}

std::expected<Metadata, GatewayAnswer> GatewayCore::metadata(GatewayRequest& r, const std::string& key,
                                                             const std::string& url, const std::string& accept,
                                                             int fresh_s) {
  auto cached = [&]() -> std::optional<Metadata> {
    auto p = cache_.find_meta(key);
    if (!p) return std::nullopt;
    Metadata m;
    m.path = *p;
    m.content_type = cache_.get_note(key + "#content-type").value_or("application/octet-stream");
    m.final_url = cache_.get_note(key + "#url").value_or(url);
    return m;
  };
  if (r.session.policy.mode == PackageMode::offline) {
    if (auto m = cached()) return *m;
    return std::unexpected(refuse(404, key + " is not in the package cache (packages.mode offline)"));
  }
  if (fresh_s > 0)
    if (auto m = cached()) {
      struct stat st {};
      if (::stat(m->path.c_str(), &st) == 0 && ::time(nullptr) - st.st_mtime < fresh_s) return *m;
    }
  std::string temp = cache_.temp_path();
  auto f = upstream_.get(url, accept, temp, 512ull << 20);
  if (!f || (f->status != 200 && f->status != 404 && f->status != 410)) {
    ::unlink(temp.c_str());
    if (auto m = cached()) return *m;  // the upstream is down: what we saw last
    std::string why = f ? "answered " + std::to_string(f->status) : f.error().message();
    return std::unexpected(refuse(502, "upstream " + registry_origin(Registry::pypi) + " for " + key + ": " + why));
  }
  if (f->status != 200) {
    ::unlink(temp.c_str());
    return std::unexpected(refuse(404, key + " does not exist upstream"));
  }
  // Notes before the body: a reader that finds the body finds its notes too.
  (void)cache_.put_note(key + "#content-type", f->content_type);
  (void)cache_.put_note(key + "#url", f->final_url);
  if (auto p = cache_.put_meta(key, temp); !p) {
    ::unlink(temp.c_str());
    return std::unexpected(refuse(500, p.error().message()));
  }
  Metadata m;
  m.path = *cache_.find_meta(key);
  m.content_type = f->content_type;
  m.final_url = f->final_url;
  return m;
}

GatewayAnswer GatewayCore::deliver(GatewayRequest& r, const FileWant& want) {
  GatewaySession& s = r.session;
  const PackagePolicy& policy = s.policy;
  InstallEvent e;
  e.manager = std::string(to_string(want.registry));
  e.name = want.name;
  e.version = want.version;
  e.registry = registry_origin(want.registry);
  auto deny = [&](unsigned status, std::string rule, const std::string& reason) {
    e.verdict = "denied";
    e.rule = std::move(rule);
    e.reason = reason;
    record(r, e);
    return refuse(status, reason);
  };
  Decision d = registry_decision(s, want.registry);
  if (d.allowed) d = decide(policy, want.registry, want.name, want.version, want.published_ms, now_ms());
  if (!d.allowed) return deny(403, d.rule, d.reason);
  e.rule = d.rule;
  std::string what = std::string(to_string(want.registry)) + ":" + want.name + " " + want.version;
  std::optional<std::string> expected = want.sha256;
  if (!expected && !want.note_key.empty()) expected = cache_.get_note(want.note_key);
  if (d.locked_sha256 && expected && *expected != *d.locked_sha256)
    return deny(403, d.rule,
                "sha256 mismatch for " + what + ": the lock says " + *d.locked_sha256 + ", the registry publishes " +
                    *expected);
  auto caps = [&](uint64_t size) -> std::optional<GatewayAnswer> {
    if (policy.max_package_bytes && size > policy.max_package_bytes)
      return deny(403, "max_package_mb", what + " is " + mb(size) + ", over the per-package cap of " +
                                             mb(policy.max_package_bytes));
    std::lock_guard lock(s.mu);
    if (policy.max_download_bytes && s.downloaded + size > policy.max_download_bytes) {
      e.size = size;
      return deny(403, "max_download_mb", "the session's download cap of " + mb(policy.max_download_bytes) +
                                              " would be exceeded by " + what + " (" + mb(size) + ")");
    }
    s.downloaded += size;
    return std::nullopt;
  };
  auto serve = [&](const std::string& path, uint64_t size, const std::string& sha, bool hit) {
    cache_.count(hit);
    e.verdict = "allowed";
    e.sha256 = sha;
    e.size = size;
    e.cache_hit = hit;
    record(r, e);
    GatewayAnswer a;
    a.content_type = want.content_type;
    a.file = path;
    return a;
  };
  if (expected)
    if (auto path = cache_.find(*expected)) {
      uint64_t size = file_size(*path);
      if (auto refused = caps(size)) return *refused;
      return serve(*path, size, *expected, true);
    }
  if (policy.mode == PackageMode::offline)
    return deny(404, "packages.mode offline", what + " is not in the package cache (packages.mode offline)");
  std::string temp = cache_.temp_path();
  auto f = upstream_.get(want.url, "", temp, policy.max_package_bytes);
  auto drop = [&] { ::unlink(temp.c_str()); };
  if (!f) {
    drop();
    if (f.error().code == ErrorCode::limit)
      return deny(403, "max_package_mb", what + " is over the per-package cap of " + mb(policy.max_package_bytes));
    e.verdict = "failed";
    e.reason = f.error().message();
    record(r, e);
    return refuse(502, e.reason);
  }
  if (f->status != 200) {
    drop();
    e.verdict = "failed";
    e.reason = "upstream answered " + std::to_string(f->status) + " for " + what;
    record(r, e);
    return refuse(f->status == 404 ? 404 : 502, e.reason);
  }
  e.sha256 = f->sha256;
  e.size = f->size;
  auto mismatch = [&](const std::string& kind, const std::string& published, const std::string& got) {
    drop();
    return deny(403, "verify", "the bytes of " + what + " do not match the registry's " + kind + " (published " +
                                   published + ", received " + got + "); not cached");
  };
  if (want.sha256 && *want.sha256 != f->sha256) return mismatch("sha256", *want.sha256, f->sha256);
  if (want.sha512_base64 && *want.sha512_base64 != f->sha512_base64)
    return mismatch("sha512 integrity", *want.sha512_base64, f->sha512_base64);
  if (!want.sha512_base64 && want.sha1_hex && *want.sha1_hex != f->sha1_hex)
    return mismatch("sha1 shasum", *want.sha1_hex, f->sha1_hex);
  if (d.locked_sha256 && *d.locked_sha256 != f->sha256) {
    drop();
    return deny(403, d.rule, "sha256 mismatch for " + what + ": the lock says " + *d.locked_sha256 +
                                 ", the registry serves " + f->sha256);
  }
  if (auto refused = caps(f->size)) {
    drop();
    return *refused;
  }
  auto stored = cache_.adopt(temp, f->sha256);
  if (!stored) {
    drop();
    return refuse(500, stored.error().message());
  }
  if (!want.note_key.empty()) (void)cache_.put_note(want.note_key, f->sha256);
  return serve(*stored, f->size, f->sha256, false);
}

// ---- PackageGateway --------------------------------------------------------------------

struct PackageGateway::Impl {
  std::unique_ptr<UpstreamClient> upstream;
  std::unique_ptr<BlobCache> cache;
  std::unique_ptr<GatewayCore> core;
  std::mutex mu;  // guards sessions (the map; each session guards its own counters)
  std::map<std::string, std::shared_ptr<GatewaySession>> sessions;
  std::unique_ptr<boost::asio::thread_pool> pool;
};

PackageGateway::PackageGateway(GatewayConfig config, InstallRecorder recorder)
    : config_(std::move(config)), impl_(std::make_unique<Impl>()) {
  (void)recorder;
}

PackageGateway::~PackageGateway() {
  if (impl_->pool) impl_->pool->join();
}

Result<std::unique_ptr<PackageGateway>> PackageGateway::open(const GatewayConfig& config, InstallRecorder recorder) {
  for (const std::string* u : {&config.pypi, &config.npm, &config.debian}) {
    if (u->empty()) continue;
    auto parsed = parse_url(*u);
    if (!parsed) return fail(ErrorCode::invalid_argument, "packages.upstreams: " + parsed.error().context);
    if (parsed->scheme != "https")
      return fail(ErrorCode::invalid_argument, "packages.upstreams: `" + *u + "` must be https (upstreams are fetched over TLS)");
  }
  std::unique_ptr<PackageGateway> g(new PackageGateway(config, recorder));
  auto upstream = UpstreamClient::open(config.ca_file);
  if (!upstream) return std::unexpected(upstream.error());
  auto cache = BlobCache::open(config.cache_dir);
  if (!cache) return std::unexpected(cache.error());
  g->impl_->upstream = std::move(*upstream);
  g->impl_->cache = std::move(*cache);
  g->impl_->core = std::make_unique<GatewayCore>(g->config_, *g->impl_->upstream, *g->impl_->cache, std::move(recorder));
  g->impl_->pool = std::make_unique<boost::asio::thread_pool>(std::max(1, config.threads));
  return g;
}

void PackageGateway::add_session(const std::string& session_id, const std::string& tenant_id, PackagePolicy policy) {
  auto s = std::make_shared<GatewaySession>();
  s->id = session_id;
  s->tenant_id = tenant_id;
  s->policy = std::move(policy);
  std::lock_guard lock(impl_->mu);
  impl_->sessions[session_id] = std::move(s);
}

void PackageGateway::remove_session(const std::string& session_id) {
  std::lock_guard lock(impl_->mu);
  impl_->sessions.erase(session_id);
}

uint64_t PackageGateway::cache_hits() const { return impl_->cache->hits(); }
uint64_t PackageGateway::cache_misses() const { return impl_->cache->misses(); }

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The request's path, percent-decoded, without the query; nullopt when it could step
// outside the gateway's tree ("..", NUL, a backslash).
std::optional<std::string> clean_path(std::string_view target) {
  if (target.starts_with("http://")) {  // absolute-form, as a proxy receives it
    auto slash = target.find('/', 7);
    target = slash == std::string_view::npos ? "/" : target.substr(slash);
  }
  target = target.substr(0, target.find_first_of("?#"));
  std::string out;
  for (size_t i = 0; i < target.size(); ++i) {
    char c = target[i];
    if (c == '%' && i + 2 < target.size() + 0 && i + 2 <= target.size() - 1 + 0) {
      int hi = hex_value(target[i + 1]), lo = hex_value(target[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      c = static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (c == '\0' || c == '\\') return std::nullopt;
    out += c;
  }
  for (size_t start = 0; start <= out.size();) {
    size_t end = out.find('/', start);
    std::string_view seg = std::string_view(out).substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (seg == ".." || seg == ".") return std::nullopt;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

GatewayAnswer PackageGateway::serve(const DoorPeer& peer, const HttpRequest& request) {
  std::shared_ptr<GatewaySession> s;
  {
    std::lock_guard lock(impl_->mu);
    if (auto it = impl_->sessions.find(peer.session_id); it != impl_->sessions.end()) s = it->second;
  }
  if (!s) {  // a session the gateway was not told about is `off`
    s = std::make_shared<GatewaySession>();
    s->id = peer.session_id;
    s->tenant_id = peer.tenant_id;
  }
  if (request.method() != http::verb::get && request.method() != http::verb::head)
    return GatewayCore::refuse(405, "the package gateway answers GET only");
  auto path = clean_path(request.target());
  if (!path || path->empty() || (*path)[0] != '/') return GatewayCore::refuse(400, "bad package path");
  GatewayRequest r{*s, {}, std::string(request[http::field::host]), std::string(request[http::field::accept])};
  if (r.host.empty()) r.host = std::string(kPackagesHost);
  auto below = [&](std::string_view prefix) -> bool {
    if (!path->starts_with(prefix)) return false;
    r.path = path->substr(prefix.size());
    return true;
  };
  GatewayCore& core = *impl_->core;
  // pip prints why a download was refused but not why an index was: its front-end
  // answers name-level refusals itself (pypi.cc).
  if (below("/pypi/")) return serve_pypi(core, r);
  if (below("/npm/")) {
    if (auto refused = core.check_registry(r, Registry::npm)) return *refused;
    return serve_npm(core, r);
  }
  if (below("/debian/")) {
    if (auto refused = core.check_registry(r, Registry::debian)) return *refused;
    return serve_debian(core, r);
  }
  if (s->policy.mode == PackageMode::off)
    return GatewayCore::refuse(403, "package installs are disabled by policy (packages.mode off)");
  return GatewayCore::refuse(404, "the package gateway serves /pypi/, /npm/ and /debian/");
}

http::message_generator PackageGateway::to_message(GatewayAnswer a, unsigned version, bool keep_alive) {
  auto head = [&](auto& res) {
    res.result(a.status);
    if (!a.reason.empty()) res.reason(a.reason);
    res.set(http::field::content_type, a.content_type);
    res.set(http::field::server, "cela-package-gateway");
    res.keep_alive(keep_alive);
  };
  if (!a.file.empty()) {
    http::response<http::file_body> res{http::status::ok, version};
    boost::system::error_code ec;
    res.body().open(a.file.c_str(), boost::beast::file_mode::scan, ec);
    if (!ec) {
      head(res);
      res.prepare_payload();
      return res;
    }
    a = GatewayCore::refuse(500, "reading the package cache: " + ec.message());
  }
  http::response<http::string_body> res{http::status::ok, version};
  head(res);
  res.body() = std::move(a.body);
  res.prepare_payload();
  return res;
}

void PackageGateway::handle(const DoorPeer& peer, HttpRequest request, Reply reply) {
  std::shared_ptr<GatewaySession> s;
  {
    std::lock_guard lock(impl_->mu);
    if (auto it = impl_->sessions.find(peer.session_id); it != impl_->sessions.end()) s = it->second;
  }
  unsigned version = request.version();
  bool keep_alive = request.keep_alive();
  if (s) {
    std::lock_guard lock(s->mu);
    if (s->in_flight >= kPerSessionInFlight) {
      auto a = GatewayCore::refuse(503, "too many package requests in flight for this session");
      return reply(to_message(std::move(a), version, false));
    }
    ++s->in_flight;
  }
  boost::asio::post(*impl_->pool, [this, peer, s, request = std::move(request), reply = std::move(reply), version,
                                   keep_alive]() mutable {
    GatewayAnswer a = serve(peer, request);
    bool head_only = request.method() == http::verb::head;
    if (s) {
      std::lock_guard lock(s->mu);
      --s->in_flight;
    }
    if (head_only && a.file.empty()) a.body.clear();
    reply(to_message(std::move(a), version, keep_alive));
  });
}

}  // namespace cela::net
