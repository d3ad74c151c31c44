// The session side of egress: what a session's door lets through (its network spec
// bounded by its tenant's ceiling, net/policy.h), the environment that points its
// clients at the door, and the recorder that keeps every attempt in the store.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "net/egress_proxy.h"
#include "net/policy.h"
#include "store/records.h"
#include "store/store.h"

namespace cela::session {

// The door's policy: `network` (mode none: no rule, internal services only) within
// `ceiling`. invalid_argument for a rule that does not parse; policy_denied for an
// allow rule beyond the ceiling.
Result<net::EgressPolicy> egress_policy(const store::NetworkPolicy& network,
                                        const std::optional<store::NetworkCeiling>& ceiling);

// Where the extra CA (egress.ca_file) goes inside a session: its own file (for
// NODE_EXTRA_CA_CERTS) and the system bundle with it appended (the trust store).
inline constexpr const char* kSessionExtraCa = "/usr/local/share/ca-certificates/cela-extra-ca.crt";
inline constexpr const char* kSessionCaBundle = "/etc/ssl/certs/ca-certificates.crt";

// "K=V" entries every exec of a session with a door starts with: the proxy variables
// (both cases) pointing at 127.0.0.1:3128, NO_PROXY for loopback, and with a CA the
// trust variables (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, PIP_CERT, NODE_EXTRA_CA_CERTS,
// GIT_SSL_CAINFO, CURL_CA_BUNDLE).
std::vector<std::string> egress_env(bool with_ca);

// EgressObserver -> store and audit, on the proxy's record thread. A limit also goes
// to `limit_hit`, which must be safe to call from that thread (the manager posts it to
// its reactor: the session's limit events, metrics and event stream).
class EgressRecorder final : public net::EgressObserver {
 public:
  // tenant_id: "" when the proxy did not say (a session that ended is then not told).
  using LimitHit = std::function<void(const std::string& session_id, const std::string& tenant_id,
                                      const std::string& kind, const std::string& detail)>;
  EgressRecorder(store::Store& store, LimitHit limit_hit) : store_(store), limit_hit_(std::move(limit_hit)) {}
  void on_attempt(const net::EgressAttempt& attempt) override;
  void on_limit(const std::string& session_id, const std::string& kind, const std::string& detail) override;
  // Attempts past the record rate: counted in the metrics, one egress.unrecorded audit
  // record with the counts, and an `egress_records` limit event.
  void on_unrecorded(const std::string& session_id, const std::string& tenant_id,
                     const net::UnrecordedAttempts& counts) override;

 private:
  store::Store& store_;
  void store_limit(const std::string& session_id, const std::string& tenant_id, const std::string& kind,
                   const std::string& detail);
  LimitHit limit_hit_;
};

}  // namespace cela::session
