// net/policy: rule syntax, matching, ceilings and the refused address ranges.
#include <gtest/gtest.h>

#include "net/policy.h"

namespace cela::net {
namespace {

EgressPolicy policy(std::vector<std::string> allow, std::vector<std::string> deny = {},
                    std::optional<std::pair<std::vector<std::string>, std::vector<std::string>>> ceiling = {}) {
  EgressPolicy p;
  auto s = parse_rules(allow, deny);
  EXPECT_TRUE(s) << s.error().message();
  p.session = *s;
  if (ceiling) {
    auto c = parse_rules(ceiling->first, ceiling->second);
    EXPECT_TRUE(c);
    p.ceiling = *c;
  }
  return p;
}

IpAddress ip(const char* text) { return *ip_literal(text); }

TEST(EgressRules, Syntax) {
  auto r = parse_rule("API.Example.com.");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->host, "api.example.com");
  EXPECT_EQ(r->ports, (std::vector<uint16_t>{80, 443}));
  r = parse_rule("*.example.org:8443");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Rule::Kind::subdomains);
  EXPECT_EQ(r->ports, (std::vector<uint16_t>{8443}));
  r = parse_rule("host.test:*");
  ASSERT_TRUE(r && r->any_port);
  r = parse_rule("[2001:db8::/32]:443");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->kind, Rule::Kind::cidr);
  r = parse_rule("[::1]:8080");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->host, "::1");
  r = parse_rule("other.test", true);  // a deny rule without a port: every port
  ASSERT_TRUE(r && r->any_port);
  for (const char* bad : {"", "*.*.x", "a*.x", "a.test:0", "a.test:70000", "a.test:", "bad host", "[::1", "10.0.0.0/33",
                          ".x", "a.test:8a"})
    EXPECT_FALSE(parse_rule(bad)) << bad;
}

TEST(EgressRules, GlobsMatchSubdomainsOnlyAndPortsNarrow) {
  auto p = policy({"*.example.org", "api.example.com:8443"});
  EXPECT_TRUE(decide_host(p, "a.example.org", 443).allowed);
  EXPECT_TRUE(decide_host(p, "a.b.example.org", 80).allowed);
  EXPECT_FALSE(decide_host(p, "example.org", 443).allowed);
  EXPECT_FALSE(decide_host(p, "badexample.org", 443).allowed);
  EXPECT_FALSE(decide_host(p, "a.example.org", 22).allowed);
  EXPECT_TRUE(decide_host(p, "API.example.com", 8443).allowed);
  EXPECT_FALSE(decide_host(p, "api.example.com", 443).allowed);
  Verdict v = decide_host(p, "evil.com", 443);
  EXPECT_EQ(refusal_line("evil.com", 443, v), "cela: evil.com:443 denied by session policy (no rule matches)");
}

TEST(EgressRules, DenyWinsAndTheCeilingBounds) {
  auto p = policy({"*"}, {"*.internal"}, {{{"*.example.org", "*.corp.test:*"}, {"secret.example.org"}}});
  Verdict v = decide_host(p, "db.internal", 443);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.rule, "session deny *.internal");
  v = decide_host(p, "secret.example.org", 443);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.rule, "tenant ceiling deny secret.example.org");
  v = decide_host(p, "elsewhere.com", 443);  // the session allows *, the ceiling does not
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.rule, "tenant ceiling");
  EXPECT_TRUE(decide_host(p, "www.example.org", 443).allowed);
}

TEST(EgressRules, CheckWithinCeiling) {
  auto ceiling = *parse_rules({"*.example.org", "api.test:443", "203.0.113.0/24:*"}, {"x.example.org"});
  EXPECT_TRUE(check_within(*parse_rules({"a.example.org", "*.b.example.org", "api.test:443"}, {"any.deny"}), ceiling));
  EXPECT_TRUE(check_within(*parse_rules({"203.0.113.7:8080", "203.0.113.128/25"}, {}), ceiling));
  for (const char* beyond : {"*", "example.org", "api.test", "api.test:*", "x.example.org", "198.51.100.1",
                             "203.0.0.0/16"}) {
    auto r = check_within(*parse_rules({beyond}, {}), ceiling);
    ASSERT_FALSE(r) << beyond;
    EXPECT_EQ(r.error().code, ErrorCode::policy_denied);
  }
}

TEST(EgressAddresses, BlockedRanges) {
  AddressPolicy a;
  struct Case {
    const char* address;
    const char* why;
  } cases[] = {{"127.0.0.1", "loopback"},       {"169.254.169.254", "link-local"}, {"10.1.2.3", "private"},
               {"172.31.0.1", "private"},       {"192.168.0.1", "private"},        {"100.64.0.1", "CGNAT"},
               {"100.127.255.255", "CGNAT"},    {"0.0.0.0", "unspecified"},        {"224.0.0.1", "multicast"},
               {"255.255.255.255", "reserved"}, {"::1", "loopback"},               {"::", "unspecified"},
               {"fe80::1", "link-local"},       {"fd00:ec2::254", "private"},      {"fc00::1", "private"},
               {"::ffff:169.254.169.254", "link-local"}, {"64:ff9b::a9fe:a9fe", "link-local"},
               {"ff02::1", "multicast"}};
  for (const auto& c : cases) EXPECT_EQ(blocked_range(ip(c.address), a), c.why) << c.address;
  for (const char* fine : {"93.184.216.34", "100.128.0.1", "172.32.0.1", "2606:4700::1111", "1.1.1.1"})
    EXPECT_EQ(blocked_range(ip(fine), a), "") << fine;
  a.allowed.push_back(*parse_cidr("127.0.0.0/8"));
  EXPECT_EQ(blocked_range(ip("127.0.0.5"), a), "");
  EXPECT_EQ(blocked_range(ip("::ffff:127.0.0.5"), a), "");
  a.own.push_back(ip("203.0.113.9"));
  EXPECT_EQ(blocked_range(ip("203.0.113.9"), a), "the daemon's own address");
}

TEST(EgressAddresses, EveryAddressIsDecidedAndOwnEndpointsNeverPass) {
  AddressPolicy a;
  a.allowed.push_back(*parse_cidr("127.0.0.0/8"));
  a.own_endpoints.push_back({ip("127.0.0.1"), 8080});
  auto p = policy({"*:*"}, {"198.51.100.0/24"});
  Verdict by_name = decide_host(p, "x.test", 8080);
  ASSERT_TRUE(by_name.allowed);
  EXPECT_TRUE(decide_address(p, a, by_name, ip("127.0.0.1"), 8081).allowed);
  Verdict v = decide_address(p, a, by_name, ip("127.0.0.1"), 8080);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.reason, "127.0.0.1:8080 is the daemon's own endpoint");
  v = decide_address(p, a, by_name, ip("198.51.100.7"), 8081);
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.rule, "session deny 198.51.100.0/24");
  // An IP literal is judged as a host first: deny CIDRs apply by name too.
  EXPECT_FALSE(decide_host(p, "198.51.100.7", 80).allowed);
}

TEST(EgressAddresses, CidrAllowRulesDecideByAddress) {
  AddressPolicy a;
  auto p = policy({"203.0.113.0/24:443"});
  Verdict by_name = decide_host(p, "names.test", 443);
  ASSERT_TRUE(by_name.allowed);
  EXPECT_TRUE(decide_address(p, a, by_name, ip("203.0.113.20"), 443).allowed);
  EXPECT_FALSE(decide_address(p, a, by_name, ip("198.51.100.1"), 443).allowed);
  EXPECT_FALSE(decide_host(p, "names.test", 80).allowed);
  EXPECT_TRUE(decide_host(p, "203.0.113.20", 443).allowed);
  EXPECT_FALSE(decide_host(p, "203.0.114.20", 443).allowed);
}

}  // namespace
}  // namespace cela::net
