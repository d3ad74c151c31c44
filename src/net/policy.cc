#include "net/policy.h"

#include <algorithm>
#include <charconv>

namespace cela::net {
namespace ip = boost::asio::ip;

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::ranges::transform(out, out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The IPv4 address an IPv6 one stands for (mapped, NAT64), if any.
std::optional<ip::address_v4> embedded_v4(const ip::address_v6& v6) {
  if (v6.is_v4_mapped()) return ip::make_address_v4(ip::v4_mapped, v6);
  auto b = v6.to_bytes();
  static constexpr std::array<uint8_t, 12> kNat64 = {0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::equal(kNat64.begin(), kNat64.end(), b.begin()))
    return ip::address_v4(ip::address_v4::bytes_type{b[12], b[13], b[14], b[15]});
  return std::nullopt;
}

// An IPv4-mapped address is the IPv4 address it carries.
IpAddress canonical(const IpAddress& a) {
  if (a.is_v6() && a.to_v6().is_v4_mapped()) return ip::make_address_v4(ip::v4_mapped, a.to_v6());
  return a;
}

bool prefix_match(const uint8_t* a, const uint8_t* b, int prefix) {
  int full = prefix / 8, rest = prefix % 8;
  if (!std::equal(a, a + full, b)) return false;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (a[full] & mask) == (b[full] & mask);
}

Result<uint16_t> parse_port(std::string_view text, std::string_view rule) {
  unsigned value = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || p != text.data() + text.size() || value == 0 || value > 65535)
    return fail(ErrorCode::invalid_argument, "bad port in egress rule `" + std::string(rule) + "`");
  return static_cast<uint16_t>(value);
}

bool valid_host_label_chars(std::string_view host) {
  if (host.empty() || host.size() > 253) return false;
  return std::ranges::all_of(host, [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
  });
}

struct Named {
  std::string_view scope;  // "session" or "tenant ceiling"
  const RuleSet* rules;
};

// Does a ceiling rule cover everything `r` matches?
bool covers(const Rule& c, const Rule& r) {
  if (!c.any_port) {
    if (r.any_port) return false;
    for (uint16_t p : r.ports)
      if (!c.matches_port(p)) return false;
  }
  switch (r.kind) {
    case Rule::Kind::any_host: return c.kind == Rule::Kind::any_host;
    case Rule::Kind::exact:
      if (auto literal = ip_literal(r.host); literal && c.kind == Rule::Kind::cidr) return c.cidr.contains(*literal);
      return c.kind == Rule::Kind::any_host || (c.kind == Rule::Kind::exact && c.host == r.host) ||
             (c.kind == Rule::Kind::subdomains && r.host.ends_with("." + c.host));
    case Rule::Kind::subdomains:
      return c.kind == Rule::Kind::any_host ||
             (c.kind == Rule::Kind::subdomains && (r.host == c.host || r.host.ends_with("." + c.host)));
    case Rule::Kind::cidr:
      return c.kind == Rule::Kind::cidr && c.cidr.prefix <= r.cidr.prefix && c.cidr.contains(r.cidr.base);
  }
  return false;
}

}  // namespace

std::string normalise_host(std::string_view host) {
  std::string h = lower(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  while (!h.empty() && h.back() == '.') h.pop_back();
  return h;
}

std::optional<IpAddress> ip_literal(std::string_view host) {
  boost::system::error_code ec;
  std::string h = normalise_host(host);
  auto a = ip::make_address(h, ec);
  if (ec) return std::nullopt;
  return canonical(a);
}

bool Cidr::contains(const IpAddress& address) const {
  IpAddress a = canonical(address);
  if (base.is_v4() != a.is_v4()) return false;
  if (a.is_v4()) {
    auto x = a.to_v4().to_bytes(), y = base.to_v4().to_bytes();
    return prefix_match(x.data(), y.data(), prefix);
  }
  auto x = a.to_v6().to_bytes(), y = base.to_v6().to_bytes();
  return prefix_match(x.data(), y.data(), prefix);
}

std::string Cidr::text() const { return base.to_string() + "/" + std::to_string(prefix); }

Result<Cidr> parse_cidr(std::string_view text) {
  auto slash = text.find('/');
  std::string_view addr = text.substr(0, slash);
  boost::system::error_code ec;
  auto a = ip::make_address(std::string(addr), ec);
  if (ec) return fail(ErrorCode::invalid_argument, "bad address range `" + std::string(text) + "`");
  Cidr c{canonical(a), canonical(a).is_v4() ? 32 : 128};
  if (slash != std::string_view::npos) {
    std::string_view bits = text.substr(slash + 1);
    int value = -1;
    auto [p, e] = std::from_chars(bits.data(), bits.data() + bits.size(), value);
    if (e != std::errc{} || p != bits.data() + bits.size() || value < 0 || value > c.prefix)
      return fail(ErrorCode::invalid_argument, "bad prefix length in address range `" + std::string(text) + "`");
    c.prefix = value;
  }
  return c;
}

bool Rule::matches_host(std::string_view h, uint16_t port) const {
  if (!matches_port(port)) return false;
  switch (kind) {
    case Kind::exact: return h == host;
    case Kind::subdomains: return h.size() > host.size() + 1 && h.ends_with(host) && h[h.size() - host.size() - 1] == '.';
    case Kind::any_host: return true;
    case Kind::cidr: return false;
  }
  return false;
}

bool Rule::matches_address(const IpAddress& address, uint16_t port) const {
  return kind == Kind::cidr && matches_port(port) && cidr.contains(address);
}

Result<Rule> parse_rule(std::string_view raw, bool deny) {
  Rule r;
  r.text = lower(raw);
  std::string_view text = r.text;
  auto bad = [&](std::string why) { return fail(ErrorCode::invalid_argument, "egress rule `" + r.text + "`: " + why); };
  if (text.empty()) return bad("empty");
  std::string_view host = text, port;
  if (text.front() == '[') {  // [v6] or [v6/len], then maybe :port
    auto close = text.find(']');
    if (close == std::string_view::npos) return bad("unclosed [");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return bad("expected :port after ]");
      port = rest.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else if (std::ranges::count(text, ':') == 1) {
    auto colon = text.find(':');
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (port.empty()) return bad("empty port");
  } else if (std::ranges::count(text, ':') > 1) {
    // A bare IPv6 literal or range: no port (write [v6]:port for one).
  }
  if (port == "*") {
    r.any_port = true;
  } else if (!port.empty()) {
    auto p = parse_port(port, r.text);
    if (!p) return std::unexpected(p.error());
    r.ports = {*p};
  } else if (deny) {
    r.any_port = true;  // a deny rule without a port denies every port
  } else {
    r.ports = {80, 443};
  }
  if (host.find('/') != std::string_view::npos) {
    auto c = parse_cidr(host);
    if (!c) return bad("bad address range");
    r.kind = Rule::Kind::cidr;
    r.cidr = *c;
    return r;
  }
  if (host == "*") {
    r.kind = Rule::Kind::any_host;
    return r;
  }
  if (auto literal = ip_literal(host)) {
    r.kind = Rule::Kind::exact;
    r.host = literal->to_string();
    return r;
  }
  if (host.starts_with("*.")) {
    r.kind = Rule::Kind::subdomains;
    r.host = normalise_host(host.substr(2));
  } else {
    r.kind = Rule::Kind::exact;
    r.host = normalise_host(host);
  }
  if (!valid_host_label_chars(r.host) || r.host.find('*') != std::string::npos || r.host.starts_with('.'))
    return bad("not a host name, `*.` glob or address range");
  return r;
}

std::vector<std::string> RuleSet::allow_texts() const {
  std::vector<std::string> out;
  for (const auto& r : allow) out.push_back(r.text);
  return out;
}
std::vector<std::string> RuleSet::deny_texts() const {
  std::vector<std::string> out;
  for (const auto& r : deny) out.push_back(r.text);
  return out;
}

Result<RuleSet> parse_rules(const std::vector<std::string>& allow, const std::vector<std::string>& deny) {
  RuleSet set;
  for (const auto& a : allow) {
    auto r = parse_rule(a);
    if (!r) return std::unexpected(r.error());
    set.allow.push_back(std::move(*r));
  }
  for (const auto& d : deny) {
    auto r = parse_rule(d, true);
    if (!r) return std::unexpected(r.error());
    set.deny.push_back(std::move(*r));
  }
  return set;
}

Result<void> check_within(const RuleSet& asked, const RuleSet& ceiling) {
  for (const auto& r : asked.allow) {
    bool ok = std::ranges::any_of(ceiling.allow, [&](const Rule& c) { return covers(c, r); });
    // A rule the ceiling denies outright can never let anything through; it is still
    // beyond what the tenant may ask.
    if (ok && r.kind == Rule::Kind::exact)
      ok = !std::ranges::any_of(ceiling.deny, [&](const Rule& d) { return covers(d, r); });
    if (!ok)
      return fail(ErrorCode::policy_denied, "egress rule `" + r.text + "` is beyond the tenant's network ceiling");
  }
  return {};
}

std::string blocked_range(const IpAddress& address, const AddressPolicy& policy) {
  IpAddress a = canonical(address);
  for (const auto& c : policy.allowed)
    if (c.contains(a)) return "";
  if (std::ranges::find(policy.own, a) != policy.own.end()) return "the daemon's own address";
  if (a.is_v6()) {
    auto v6 = a.to_v6();
    if (auto v4 = embedded_v4(v6)) return blocked_range(IpAddress(*v4), policy);
    auto b = v6.to_bytes();
    if (v6.is_unspecified()) return "unspecified";
    if (v6.is_loopback()) return "loopback";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return "link-local";
    if ((b[0] & 0xfe) == 0xfc) return "private";  // fc00::/7, unique local (fd00:ec2::254 too)
    if (b[0] == 0xff) return "multicast";
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0xc0) return "private";  // fec0::/10, deprecated site-local
    return "";
  }
  auto b = a.to_v4().to_bytes();
  if (b[0] == 0) return "unspecified";
  if (b[0] == 127) return "loopback";
  if (b[0] == 169 && b[1] == 254) return "link-local";
  if (b[0] == 10 || (b[0] == 172 && (b[1] & 0xf0) == 16) || (b[0] == 192 && b[1] == 168)) return "private";
  if (b[0] == 100 && (b[1] & 0xc0) == 64) return "CGNAT";
  if ((b[0] & 0xf0) == 224) return "multicast";
  if (b[0] >= 240) return "reserved";
  if (b[0] == 192 && b[1] == 0 && b[2] == 0) return "reserved";  // 192.0.0.0/24, IETF protocol assignments
  if (b[0] == 198 && (b[1] & 0xfe) == 18) return "reserved";     // 198.18.0.0/15, benchmarking
  return "";
}

Verdict decide_host(const EgressPolicy& policy, std::string_view raw_host, uint16_t port) {
  std::string host = normalise_host(raw_host);
  auto literal = ip_literal(host);
  if (literal) host = literal->to_string();
  Verdict v;
  const Named scopes[] = {{"tenant ceiling", policy.ceiling ? &*policy.ceiling : nullptr}, {"session", &policy.session}};
  for (const auto& [scope, rules] : scopes) {
    if (!rules) continue;
    for (const auto& d : rules->deny) {
      bool hit = d.kind == Rule::Kind::cidr ? literal && d.matches_address(*literal, port) : d.matches_host(host, port);
      if (hit) {
        v.rule = std::string(scope) + " deny " + d.text;
        v.reason = "deny wins";
        return v;
      }
    }
  }
  // Both the session and the ceiling must allow: the session first (its refusal is
  // the one its owner can fix).
  for (const auto& [scope, rules] : {scopes[1], scopes[0]}) {
    if (!rules) continue;
    const Rule* by_name = nullptr;
    bool cidr_candidate = false;
    for (const auto& a : rules->allow) {
      if (a.kind == Rule::Kind::cidr) {
        if (literal ? a.matches_address(*literal, port) : a.matches_port(port)) cidr_candidate = true;
        if (literal && a.matches_address(*literal, port)) {
          by_name = &a;
          break;
        }
        continue;
      }
      if (a.matches_host(host, port)) {
        by_name = &a;
        break;
      }
    }
    bool is_session = scope == std::string_view("session");
    if (by_name) {
      if (is_session) v.rule = "session allow " + by_name->text;
      continue;
    }
    if (cidr_candidate && !literal) {
      // Decided by address (stage 2).
      (is_session ? v.by_cidr_session : v.by_cidr_ceiling) = true;
      if (is_session) v.rule = "session allow (address range)";
      continue;
    }
    v.rule = is_session ? "session policy" : "tenant ceiling";
    v.reason = "no rule matches";
    v.by_cidr_session = v.by_cidr_ceiling = false;
    return v;
  }
  v.allowed = true;
  return v;
}

Verdict decide_address(const EgressPolicy& policy, const AddressPolicy& addresses, const Verdict& by_name,
                       const IpAddress& raw, uint16_t port) {
  IpAddress address = canonical(raw);
  Verdict v;
  for (const auto& [own, own_port] : addresses.own_endpoints) {
    if (own_port == port && (canonical(own) == address || own.is_unspecified())) {
      v.rule = "address policy";
      v.reason = address.to_string() + ":" + std::to_string(port) + " is the daemon's own endpoint";
      return v;
    }
  }
  const Named scopes[] = {{"tenant ceiling", policy.ceiling ? &*policy.ceiling : nullptr}, {"session", &policy.session}};
  for (const auto& [scope, rules] : scopes) {
    if (!rules) continue;
    for (const auto& d : rules->deny)
      if (d.matches_address(address, port)) {
        v.rule = std::string(scope) + " deny " + d.text;
        v.reason = "deny wins (" + address.to_string() + ")";
        return v;
      }
  }
  if (std::string why = blocked_range(address, addresses); !why.empty()) {
    v.rule = "address policy";
    v.reason = address.to_string() + " is " + why;
    return v;
  }
  auto in_cidr = [&](const RuleSet& rules) -> const Rule* {
    for (const auto& a : rules.allow)
      if (a.matches_address(address, port)) return &a;
    return nullptr;
  };
  Verdict out = by_name;
  if (by_name.by_cidr_session) {
    const Rule* r = in_cidr(policy.session);
    if (!r) {
      v.rule = "session policy";
      v.reason = "no rule matches " + address.to_string();
      return v;
    }
    out.rule = "session allow " + r->text;
  }
  if (by_name.by_cidr_ceiling && policy.ceiling && !in_cidr(*policy.ceiling)) {
    v.rule = "tenant ceiling";
    v.reason = "no rule matches " + address.to_string();
    return v;
  }
  return out;
}

std::string refusal_line(std::string_view host, uint16_t port, const Verdict& verdict) {
  std::string h(host);
  if (h.find(':') != std::string::npos) h = "[" + h + "]";
  return "cela: " + h + ":" + std::to_string(port) + " denied by " + verdict.rule +
         (verdict.reason.empty() ? "" : " (" + verdict.reason + ")");
}

}  // namespace cela::net
