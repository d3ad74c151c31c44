// EgressProxy: the one way out of a session (docs/security.md "Network").
//
// Each session that has a door owns a TCP listener on 127.0.0.1:3128 inside its own
// network namespace, created by its init before any sandbox code ran and handed to the
// host (agent/init.h). The proxy accepts on that listener directly, so the door is
// per session by construction: no path names it, nothing of another session or of the
// host's unix sockets is reachable through it, and init never copies a byte.
//
// On a door the proxy speaks HTTP CONNECT (tunnels), plain-HTTP forwarding
// (absolute-form requests, streamed both ways, keep-alive) and SOCKS5 (CONNECT with a
// name, resolved here, or an address). A plain-HTTP request for the host of a
// registered InternalService (net/internal_service.h) goes to that service: never
// resolved, never dialled. Everything else is decided by the door's EgressPolicy
// (net/policy.h): by name first, then every address the name resolves to on the host,
// then the address actually connected; a refusal is a 403 whose one-line body names
// the rule. Every attempt is reported to the EgressObserver.
//
// Threads: one I/O thread owns every door and connection (so none of their state
// needs a lock); observer callbacks run on a second thread of the proxy's own, so a
// slow store never stalls traffic. Public methods may be called from any thread: they
// post to the I/O thread and return.
#pragma once

#include <cstdint>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "net/policy.h"

namespace cela::net {

class InternalService;

// The inside address of every door.
inline constexpr uint16_t kDoorPort = 3128;

// How often a session whose attempts go unrecorded gets a summary while it goes on.
inline constexpr std::chrono::seconds kUnrecordedSummaryEvery{10};

// Daemon config `egress` (docs/operations.md).
struct EgressConfig {
  std::vector<std::string> allow_cidrs;  // ranges let through despite the blocked ranges
  std::string ca_file;                   // extra CA (PEM) handed to sessions; "" = none
  uint64_t bandwidth_kbps = 0;           // per session, both directions together; 0 = none
  uint64_t max_connections = 64;         // per session, at once; 0 = none
  // Static names, looked up before DNS (tests; split-horizon names): name -> addresses.
  std::map<std::string, std::vector<std::string>> hosts;
  double connect_timeout_s = 10;
  double idle_timeout_s = 300;  // a connection with no byte either way this long is closed
  // Per session, attempts recorded one by one: a burst of record_burst, then
  // records_per_second. Past that they are counted, and the counts go out as one
  // summary (EgressObserver::on_unrecorded): a sandbox that dials in a loop cannot
  // turn the store, the audit and the daemon's memory into its own backlog.
  double records_per_second = 20;
  double record_burst = 200;
};

// Attempts of one session counted but not recorded one by one (EgressConfig above).
struct UnrecordedAttempts {
  uint64_t allowed = 0, denied = 0;
  uint64_t bytes_up = 0, bytes_down = 0;
  int64_t first_ms = 0, last_ms = 0;  // epoch ms of the first and the last one counted
  uint64_t total() const { return allowed + denied; }
};

// One attempt, as recorded (GET /v1/sessions/{id}/egress).
struct EgressAttempt {
  std::string session_id, tenant_id;
  int64_t at_ms = 0;      // when it began (epoch ms)
  std::string kind;       // "connect", "http", "socks", "service"
  std::string host, ip;   // ip: the address dialled (or the refused one); "" if none
  uint16_t port = 0;
  bool allowed = false;
  std::string rule, reason;
  uint64_t bytes_up = 0, bytes_down = 0;  // from the session, to the session
  int64_t duration_ms = 0;
};

class EgressObserver {
 public:
  virtual ~EgressObserver() = default;
  virtual void on_attempt(const EgressAttempt& attempt) = 0;
  // A per-session limit was hit: kind "egress_bandwidth" or "egress_connections".
  virtual void on_limit(const std::string& session_id, const std::string& kind, const std::string& detail) = 0;
  // Attempts past the session's record rate: once records flow again, every
  // kUnrecordedSummaryEvery while they do not, and when the door closes.
  virtual void on_unrecorded(const std::string& session_id, const std::string& tenant_id,
                             const UnrecordedAttempts& counts) = 0;
};

class EgressProxy {
 public:
  // `own_endpoints`: the daemon's listening addresses ("127.0.0.1:8080"), never
  // reachable from a session. `observer` must outlive the proxy.
  static Result<std::unique_ptr<EgressProxy>> start(const EgressConfig& config,
                                                    const std::vector<std::string>& own_endpoints,
                                                    EgressObserver* observer);
  ~EgressProxy();  // stop()
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  // Registers the service answering plain-HTTP requests for service->host() on every
  // door (net/internal_service.h). Call before sessions start.
  void add_service(std::shared_ptr<InternalService> service);

  // Starts accepting on a session's door (the listener Instance::take_door gave).
  // A door with an empty policy reaches internal services only.
  Result<void> open_door(const std::string& session_id, const std::string& tenant_id, UniqueFd listener,
                         EgressPolicy policy);
  // Replaces the door's policy for new connections (and new requests on kept-alive
  // ones); open tunnels keep running.
  void set_policy(const std::string& session_id, EgressPolicy policy);
  // Closes the door and every connection through it.
  void close_door(const std::string& session_id);
  // Closes every door, joins the threads. Idempotent.
  void stop();

  const AddressPolicy& addresses() const;

 private:
  struct Impl;
  explicit EgressProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The host's interface addresses (getifaddrs), for AddressPolicy::own.
std::vector<IpAddress> host_addresses();
// "127.0.0.1:8080", "[::1]:8080", "0.0.0.0:8080" -> address and port.
Result<std::pair<IpAddress, uint16_t>> parse_endpoint(std::string_view text);

}  // namespace cela::net
