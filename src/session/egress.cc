#include "session/egress.h"

#include <cstdio>

#include "obs/audit.h"
#include "obs/catalog.h"

namespace cela::session {

Result<net::EgressPolicy> egress_policy(const store::NetworkPolicy& network,
                                        const std::optional<store::NetworkCeiling>& ceiling) {
  net::EgressPolicy policy;
  auto session = net::parse_rules(network.allow, network.deny);
  if (!session) return std::unexpected(session.error());
  policy.session = std::move(*session);
  if (ceiling) {
    auto c = net::parse_rules(ceiling->allow, ceiling->deny);
    if (!c) return fail(ErrorCode::internal, "the tenant's network ceiling does not parse: " + c.error().context);
    if (auto within = net::check_within(policy.session, *c); !within) return std::unexpected(within.error());
    policy.ceiling = std::move(*c);
  }
  return policy;
}

std::vector<std::string> egress_env(bool with_ca) {
  std::string url = "http://127.0.0.1:" + std::to_string(net::kDoorPort);
  std::vector<std::string> env;
  for (const char* k : {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"})
    env.push_back(std::string(k) + "=" + url);
  for (const char* k : {"NO_PROXY", "no_proxy"}) env.push_back(std::string(k) + "=localhost,127.0.0.1,::1");
  if (with_ca) {
    for (const char* k : {"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"})
      env.push_back(std::string(k) + "=" + kSessionCaBundle);
    env.push_back(std::string("NODE_EXTRA_CA_CERTS=") + kSessionExtraCa);
  }
  return env;
}

namespace {

void count(const std::string& tenant_id, uint64_t allowed, uint64_t denied, uint64_t up, uint64_t down) {
  if (allowed) obs::catalog::egress_verdicts().add({tenant_id, "allowed"}, static_cast<double>(allowed));
  if (denied) obs::catalog::egress_verdicts().add({tenant_id, "denied"}, static_cast<double>(denied));
  if (up) obs::catalog::egress_bytes().add({tenant_id, "tx"}, static_cast<double>(up));
  if (down) obs::catalog::egress_bytes().add({tenant_id, "rx"}, static_cast<double>(down));
}

}  // namespace

void EgressRecorder::on_attempt(const net::EgressAttempt& a) {
  count(a.tenant_id, a.allowed ? 1 : 0, a.allowed ? 0 : 1, a.bytes_up, a.bytes_down);
  store::EgressRecord r;
  r.session_id = a.session_id;
  r.tenant_id = a.tenant_id;
  r.at = store::format_rfc3339(a.at_ms);
  r.kind = a.kind;
  r.host = a.host;
  r.ip = a.ip;
  r.port = a.port;
  r.allowed = a.allowed;
  r.rule = a.rule;
  r.reason = a.reason;
  r.bytes_up = static_cast<int64_t>(a.bytes_up);
  r.bytes_down = static_cast<int64_t>(a.bytes_down);
  r.duration_ms = a.duration_ms;
  if (auto w = store_.insert_egress(r); !w)
    std::fprintf(stderr, "cela: recording egress of %s failed: %s\n", a.session_id.c_str(), w.error().message().c_str());
  // The same attempt in the hash-chained audit (its lock orders appends from any thread).
  obs::audit("egress.connection", {a.tenant_id, a.session_id, ""},
             {{"kind", a.kind}, {"host", a.host}, {"ip", a.ip}, {"port", a.port}, {"allowed", a.allowed},
              {"rule", a.rule}, {"reason", a.reason}, {"bytes_up", a.bytes_up}, {"bytes_down", a.bytes_down},
              {"duration_ms", a.duration_ms}});
}

void EgressRecorder::on_unrecorded(const std::string& session_id, const std::string& tenant_id,
                                   const net::UnrecordedAttempts& u) {
  count(tenant_id, u.allowed, u.denied, u.bytes_up, u.bytes_down);
  obs::audit("egress.unrecorded", {tenant_id, session_id, ""},
             {{"allowed", u.allowed}, {"denied", u.denied}, {"bytes_up", u.bytes_up}, {"bytes_down", u.bytes_down},
              {"first_at", store::format_rfc3339(u.first_ms)}, {"last_at", store::format_rfc3339(u.last_ms)}});
  store_limit(session_id, tenant_id, "egress_records",
           std::to_string(u.total()) + " connection attempts (" + std::to_string(u.allowed) + " allowed, " +
               std::to_string(u.denied) + " denied) from " + store::format_rfc3339(u.first_ms) + " to " +
               store::format_rfc3339(u.last_ms) + " were over the session's record rate: counted, not listed");
}

void EgressRecorder::on_limit(const std::string& session_id, const std::string& kind, const std::string& detail) {
  store_limit(session_id, "", kind, detail);
}

void EgressRecorder::store_limit(const std::string& session_id, const std::string& tenant_id, const std::string& kind,
                                 const std::string& detail) {
  if (auto w = store_.insert_limit_event(session_id, {store::now_rfc3339(), kind, detail}); !w)
    std::fprintf(stderr, "cela: recording a limit event of %s failed: %s\n", session_id.c_str(),
                 w.error().message().c_str());
  if (limit_hit_) limit_hit_(session_id, tenant_id, kind, detail);
}

}  // namespace cela::session
