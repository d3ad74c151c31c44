// Egress policy: which destinations a session's door may reach (docs/security.md
// "Network"). Pure logic, no I/O: rules are parsed once, then every connection is
// decided in two stages, by name (before any lookup) and by address (every address
// a name returns, and the one actually dialled).
//
// Rule syntax (API.md "Network (egress)"):
//   api.example.com        that host, ports 80 and 443 (in a deny rule: every port)
//   *.example.org:443      subdomains only (not example.org itself), port 443
//   *                      any host (ports 80 and 443); `*:*` any host, any port
//   host:*                 any port
//   203.0.113.7:8443       an IP literal is a host like any other ([2001:db8::1]:443)
//   10.1.0.0/16[:port]     a CIDR matches by address ([2001:db8::/32]:443 for IPv6)
// Deny wins over allow; a session's rules are bounded by its tenant's ceiling (an
// admin's rule set): both must allow. Addresses in blocked ranges (loopback,
// link-local, private, CGNAT, multicast, the daemon's own) are refused whatever
// the rules say, unless the operator allows the range (egress.allow_cidrs).
#pragma once

#include <algorithm>
#include <array>
#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cela::net {

using IpAddress = boost::asio::ip::address;

// An address range. IPv4 ranges are kept as IPv4 (and match IPv4-mapped IPv6).
struct Cidr {
  IpAddress base;
  int prefix = 0;
  bool contains(const IpAddress& address) const;
  std::string text() const;
};
Result<Cidr> parse_cidr(std::string_view text);

struct Rule {
  enum class Kind { exact, subdomains, any_host, cidr };
  std::string text;  // as written (normalised to lower case)
  Kind kind = Kind::exact;
  std::string host;  // exact: the host; subdomains: the suffix after "*."
  Cidr cidr;
  bool any_port = false;
  std::vector<uint16_t> ports;  // when !any_port; a rule without a port: 80 and 443

  bool matches_port(uint16_t port) const { return any_port || std::ranges::find(ports, port) != ports.end(); }
  // By name: exact, subdomains, any_host (a cidr rule never matches a name).
  bool matches_host(std::string_view host, uint16_t port) const;
  bool matches_address(const IpAddress& address, uint16_t port) const;
};
// `deny`: a rule without a port means every port (an allow rule: 80 and 443).
Result<Rule> parse_rule(std::string_view text, bool deny = false);

struct RuleSet {
  std::vector<Rule> allow, deny;
  bool empty() const { return allow.empty() && deny.empty(); }
  std::vector<std::string> allow_texts() const;
  std::vector<std::string> deny_texts() const;
};
Result<RuleSet> parse_rules(const std::vector<std::string>& allow, const std::vector<std::string>& deny);

// invalid_argument naming the rule when a rule set does not parse; policy_denied
// naming the first rule of `asked.allow` that no ceiling allow rule covers (a
// session asking beyond its tenant's ceiling). Deny rules may always be added.
Result<void> check_within(const RuleSet& asked, const RuleSet& ceiling);

// What a door lets through: the session's rules bounded by the tenant's ceiling.
struct EgressPolicy {
  RuleSet session;
  std::optional<RuleSet> ceiling;  // none: the tenant has no ceiling
};

// The operator's address policy (daemon config), shared by every door.
struct AddressPolicy {
  std::vector<Cidr> allowed;         // egress.allow_cidrs: ranges let through anyway
  std::vector<IpAddress> own;        // the host's interface addresses
  // The daemon's own listening endpoints: never reachable, allow_cidrs or not.
  std::vector<std::pair<IpAddress, uint16_t>> own_endpoints;
};

// Why an address is in a refused range ("link-local", "private", "loopback",
// "CGNAT", "multicast", "unspecified", "reserved", "the daemon's own address"), or
// "" when it is not. IPv4-mapped and NAT64 (64:ff9b::/96) addresses are judged by the
// IPv4 address they carry.
std::string blocked_range(const IpAddress& address, const AddressPolicy& policy);

struct Verdict {
  bool allowed = false;
  std::string rule;    // what decided: "session allow *.example.org:443", "address policy"…
  std::string reason;  // one phrase: "no rule matches", "169.254.169.254 is link-local"
  // Allowed by name only through CIDR rules: every address must fall in one of them.
  bool by_cidr_session = false, by_cidr_ceiling = false;
};

// Stage 1, by name (or by literal when `host` is an IP address): deny rules first,
// then the session's allow rules, then the ceiling's.
Verdict decide_host(const EgressPolicy& policy, std::string_view host, uint16_t port);
// Stage 2, for one address of an allowed name: deny CIDRs, the blocked ranges, and
// the CIDR allow rules when stage 1 passed through them. Returns `by_name` (rule and
// all) when the address passes.
Verdict decide_address(const EgressPolicy& policy, const AddressPolicy& addresses, const Verdict& by_name,
                       const IpAddress& address, uint16_t port);

// The one-line body of a refusal, e.g.
// "cela: api.evil.com:443 denied by session policy (no rule matches)".
std::string refusal_line(std::string_view host, uint16_t port, const Verdict& verdict);

// Lower case, without a trailing dot; IPv6 literals without brackets.
std::string normalise_host(std::string_view host);
std::optional<IpAddress> ip_literal(std::string_view host);

}  // namespace cela::net
