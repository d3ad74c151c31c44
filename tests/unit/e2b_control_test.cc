// E2B's control plane, its translation (api/e2b/control.h): create bodies onto the
// native create spec, query values, and the objects the SDK reads.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "api/e2b/control.h"
#include "api/e2b/envd_version.h"

namespace cela::api::e2b {
namespace {
namespace json = boost::json;

json::object obj(std::string_view text) { return json::parse(text).as_object(); }

session::CreateSessionSpec spec_of(std::string_view body, const session::DaemonConfig& c = {}) {
  auto s = parse_new_sandbox(obj(body), c);
  EXPECT_TRUE(s) << s.error().message();
  return s ? *s : session::CreateSessionSpec{};
}

Error error_of(std::string_view body) {
  auto s = parse_new_sandbox(obj(body), session::DaemonConfig{});
  EXPECT_FALSE(s) << body;
  return s ? Error{} : s.error();
}

TEST(E2bControl, DefaultsAreE2bsOnTheNativeSpec) {
  session::DaemonConfig c;
  auto s = spec_of("{}", c);
  EXPECT_EQ(s.template_name, "base");
  EXPECT_EQ(s.limits.ttl_s, kDefaultTimeoutS);
  EXPECT_EQ(s.limits.idle_timeout_s, 0u);  // E2B has no idle timeout
  EXPECT_EQ(s.limits.exec_timeout_s, c.maxima.exec_timeout_s);
  EXPECT_EQ(s.limits.memory_mb, c.defaults.memory_mb);
  EXPECT_EQ(s.network.mode, "none");  // default-deny
  EXPECT_FALSE(s.pause_at_ttl);
  EXPECT_FALSE(s.auto_resume);
  EXPECT_TRUE(s.env.empty());
}

TEST(E2bControl, CreateFieldsMapOntoTheSession) {
  auto s = spec_of(R"({"templateID": "code-interpreter-v1", "timeout": 42, "metadata": {"a": "1"},
                       "envVars": {"FOO": "bar"}, "autoPause": true, "autoResume": {"enabled": true},
                       "secure": true, "autoPauseMemory": false,
                       "volumeMounts": [{"name": "data", "path": "/data"}], "someFutureField": 7})");
  EXPECT_EQ(s.template_name, "code-interpreter-v1");  // resolved by the template layer
  EXPECT_EQ(s.limits.ttl_s, 42u);
  EXPECT_EQ(s.metadata, (std::map<std::string, std::string>{{"a", "1"}}));
  EXPECT_EQ(s.env, std::vector<std::string>{"FOO=bar"});
  EXPECT_TRUE(s.pause_at_ttl);
  EXPECT_TRUE(s.auto_resume);
  ASSERT_EQ(s.volumes.size(), 1u);
  EXPECT_EQ(s.volumes[0].name, "data");
  EXPECT_EQ(s.volumes[0].path, "/data");
}

TEST(E2bControl, NetworkOpensOnlyWhatIsAskedFor) {
  EXPECT_EQ(spec_of(R"({"allow_internet_access": false})").network.mode, "none");
  auto open = spec_of(R"({"allow_internet_access": true})").network;
  EXPECT_EQ(open.mode, "allowlist");
  EXPECT_EQ(open.allow, std::vector<std::string>{"*:*"});
  auto listed = spec_of(R"({"network": {"allowOut": ["1.1.1.1", "8.8.8.0/24", "api.example.com", "2001:db8::/32"],
                                        "denyOut": ["9.9.9.9"], "allowPublicTraffic": false}})")
                    .network;
  EXPECT_EQ(listed.mode, "allowlist");
  EXPECT_EQ(listed.allow,
            (std::vector<std::string>{"1.1.1.1:*", "8.8.8.0/24:*", "api.example.com:*", "[2001:db8::/32]:*"}));
  EXPECT_EQ(listed.deny, std::vector<std::string>{"9.9.9.9:*"});
  // A deny list alone opens nothing (cela has no "everything but").
  EXPECT_EQ(spec_of(R"({"network": {"denyOut": ["0.0.0.0/0"]}})").network.mode, "none");
  auto closed_but = spec_of(R"({"allow_internet_access": false, "network": {"allowOut": ["1.1.1.1"]}})").network;
  EXPECT_EQ(closed_but.allow, std::vector<std::string>{"1.1.1.1:*"});
}

TEST(E2bControl, WhatCelaCannotHonourIsRefused) {
  for (auto body : {R"({"network": {"egressProxy": {"address": "p.test:1080"}}})",
                    R"({"network": {"rules": {"a.test": []}}})", R"({"network": {"maskRequestHost": "x"}})",
                    R"({"network": {"httpsPorts": [443]}})", R"({"mcp": {"github/x": {}}})",
                    R"({"iam": {"tokens": {"aws": {"audience": "a", "tokenType": "JWT-SVID"}}}})",
                    R"({"timeout": 0})", R"({"timeout": 1.5})", R"({"timeout": 99999999})",
                    R"({"envVars": {"A=B": "c"}})", R"({"metadata": {"a": 1}})", R"({"autoPause": "yes"})"})
    EXPECT_EQ(error_of(body).code, ErrorCode::invalid_argument) << body;
  // null reads as absent; an empty mcp is nothing asked for.
  EXPECT_EQ(spec_of(R"({"mcp": null, "network": null, "timeout": null})").limits.ttl_s, kDefaultTimeoutS);
  EXPECT_EQ(spec_of(R"({"mcp": {}})").template_name, "base");
}

TEST(E2bControl, TimeoutBodies) {
  session::DaemonConfig c;
  EXPECT_EQ(*parse_timeout(obj(R"({"timeout": 30})"), c, true), std::optional<uint64_t>(30));
  EXPECT_EQ(*parse_timeout(obj("{}"), c, false), std::nullopt);
  EXPECT_FALSE(parse_timeout(obj("{}"), c, true));
  EXPECT_FALSE(parse_timeout(obj(R"({"timeout": -1})"), c, false));
  EXPECT_FALSE(parse_timeout(obj(R"({"timeout": "30"})"), c, false));
}

TEST(E2bControl, MetadataFilterUndoesBothEncodings) {
  auto plain = parse_metadata_filter("a=1&b=two");
  ASSERT_TRUE(plain);
  EXPECT_EQ(*plain, (std::map<std::string, std::string>{{"a", "1"}, {"b", "two"}}));
  // The JS SDK: encodeURIComponent on key and value, then URLSearchParams:
  // {"k&=": "v a/l%ue+"} -> "k%2526%253D=v%2520a%252Fl%2525ue%252B"
  auto twice = parse_metadata_filter("k%2526%253D=v%2520a%252Fl%2525ue%252B");
  ASSERT_TRUE(twice);
  EXPECT_EQ(*twice, (std::map<std::string, std::string>{{"k&=", "v a/l%ue+"}}));
  // Python's urlencode (once): a space as '+'.
  auto once = parse_metadata_filter("user=ada+l");
  ASSERT_TRUE(once);
  EXPECT_EQ(once->at("user"), "ada l");
  EXPECT_FALSE(parse_metadata_filter("novalue"));
}

TEST(E2bControl, StateFilters) {
  auto both = session_states_of({});
  ASSERT_TRUE(both);
  EXPECT_EQ(*both, (std::vector<std::string>{"starting", "ready", "running", "paused"}));
  EXPECT_EQ(*session_states_of({"paused"}), std::vector<std::string>{"paused"});
  EXPECT_EQ(*session_states_of({"running,paused"}), *both);
  EXPECT_EQ(*session_states_of({"running"}), (std::vector<std::string>{"starting", "ready", "running"}));
  EXPECT_FALSE(session_states_of({"running,terminated"}));
  EXPECT_EQ(sandbox_state("paused"), "paused");
  EXPECT_EQ(sandbox_state("ready"), "running");
  EXPECT_EQ(sandbox_state("running"), "running");
}

store::SessionRecord record() {
  store::SessionRecord r;
  r.id = "s-0123456789abcdef";
  r.tenant_id = "t-1";
  r.state = "paused";
  r.spec.template_name = "base";
  r.spec.pause_at_ttl = true;
  r.limits.cpus = 0.5;
  r.limits.memory_mb = 256;
  r.limits.disk_mb = 2048;
  r.metadata = {{"k", "v"}};
  r.created_at = "2026-12-01T10:00:00.000Z";
  r.expires_at = "2026-12-01T10:05:00.000Z";
  return r;
}

TEST(E2bControl, SandboxObjectsCarryTheSessionAndItsTokens) {
  SandboxTokens tokens(std::string(32, 's'));
  auto r = record();
  json::object created = render_sandbox(r, tokens);
  EXPECT_EQ(created.at("sandboxID").as_string(), r.id);
  EXPECT_EQ(created.at("templateID").as_string(), "base");
  EXPECT_EQ(created.at("envdVersion").as_string(), kEnvdVersion);
  EXPECT_EQ(tokens.verify(TokenKind::envd, created.at("envdAccessToken").as_string(), r.id), "t-1");
  EXPECT_EQ(tokens.verify(TokenKind::traffic, created.at("trafficAccessToken").as_string(), r.id), "t-1");
  EXPECT_FALSE(tokens.verify(TokenKind::envd, created.at("envdAccessToken").as_string(), "s-other"));

  json::object detail = render_detail(r, tokens);
  EXPECT_EQ(detail.at("state").as_string(), "paused");
  EXPECT_EQ(detail.at("startedAt").as_string(), r.created_at);
  EXPECT_EQ(detail.at("endAt").as_string(), r.expires_at);
  EXPECT_EQ(detail.at("cpuCount").as_int64(), 1);  // whole CPUs, at least one
  EXPECT_EQ(detail.at("memoryMB").to_number<int64_t>(), 256);
  EXPECT_EQ(detail.at("diskSizeMB").to_number<int64_t>(), 2048);
  EXPECT_EQ(detail.at("metadata").at("k").as_string(), "v");
  EXPECT_EQ(detail.at("lifecycle").at("onTimeout").as_string(), "pause");
  EXPECT_FALSE(detail.at("allowInternetAccess").as_bool());
  EXPECT_EQ(render_listed(r).at("state").as_string(), "paused");
}

TEST(E2bControl, MetricsAreCpuPercentagesBetweenPoints) {
  store::SessionLimits limits;
  limits.cpus = 2;
  limits.memory_mb = 100;
  limits.disk_mb = 10;
  session::SessionMetrics m;
  m.wall_ms = 10'000;
  const int64_t now = 1'800'000'010'000;
  // Started at now - 10 s; 1 s of CPU in the first 5 s (10 % of 2 CPUs), then 4 s in the
  // next 4 s (50 %), then none until now.
  m.history = {{now - 5000, 1000, 5 << 20, 3, 1 << 20}, {now - 1000, 5000, 6 << 20, 3, 2 << 20}};
  m.cpu_ms = 5000;
  m.memory_bytes = 7 << 20;
  m.disk_used_bytes = 3 << 20;
  json::array points = render_metrics(m, limits, now);
  ASSERT_EQ(points.size(), 3u);
  auto at = [&](size_t i, const char* k) { return points[i].at(k).to_number<double>(); };
  EXPECT_DOUBLE_EQ(at(0, "cpuUsedPct"), 10);
  EXPECT_DOUBLE_EQ(at(1, "cpuUsedPct"), 50);
  EXPECT_DOUBLE_EQ(at(2, "cpuUsedPct"), 0);
  EXPECT_EQ(at(2, "memUsed"), 7 << 20);
  EXPECT_EQ(at(2, "diskUsed"), 3 << 20);
  EXPECT_EQ(at(0, "memTotal"), 100.0 * 1024 * 1024);
  EXPECT_EQ(at(0, "diskTotal"), 10.0 * 1024 * 1024);
  EXPECT_EQ(at(0, "cpuCount"), 2);
  EXPECT_EQ(points[2].at("timestampUnix").to_number<int64_t>(), now / 1000);
  // An ended session has no "now" point.
  m.live = false;
  EXPECT_EQ(render_metrics(m, limits, now).size(), 2u);
}

}  // namespace
}  // namespace cela::api::e2b
