// Package policy (net/package_policy.h) and package config (net/package_config.h):
// version ranges, rules, deny-wins, the lock, the cooldown, narrowing to the tenant's
// ceiling, and the upstreams read from a machine's own apt/npm/pip settings.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "net/package_config.h"
#include "net/package_policy.h"

using namespace cela;
using namespace cela::net;

namespace {
constexpr int64_t kDay = 86'400'000;
constexpr int64_t kNow = 1'800'000'000'000;

PackagePolicy gateway() {
  PackagePolicy p;
  p.mode = PackageMode::gateway;
  return p;
}
PackageRule rule(const char* text) { return parse_package_rule(text).value(); }
}  // namespace

TEST(PackagePolicy, VersionsCompareByNumbersAndPreReleasesSortFirst) {
  EXPECT_LT(compare_versions("1.2", "1.10"), 0);
  EXPECT_EQ(compare_versions("1.0", "1.0.0"), 0);
  EXPECT_LT(compare_versions("1.0rc1", "1.0"), 0);
  EXPECT_LT(compare_versions("1.0.0-beta.2", "1.0.0"), 0);
  EXPECT_GT(compare_versions("1.0.post1", "1.0"), 0);
  EXPECT_GT(compare_versions("2.32.3", "2.4"), 0);
  EXPECT_EQ(compare_versions("v1.2.3", "1.2.3"), 0);
}

TEST(PackagePolicy, RangesOfPipAndNpm) {
  EXPECT_TRUE(version_in_range("==2.*", "2.32.3"));
  EXPECT_FALSE(version_in_range("==2.*", "20.1"));
  EXPECT_FALSE(version_in_range("==2.*", "3.0"));
  EXPECT_TRUE(version_in_range(">=1.0,<2", "1.9.9"));
  EXPECT_FALSE(version_in_range(">=1.0,<2", "2.0"));
  EXPECT_TRUE(version_in_range("~=2.1", "2.9"));
  EXPECT_FALSE(version_in_range("~=2.1", "3.0"));
  EXPECT_TRUE(version_in_range("^4", "4.17.21"));
  EXPECT_FALSE(version_in_range("^4", "5.0.0"));
  EXPECT_FALSE(version_in_range("^0.2.3", "0.3.0"));
  EXPECT_TRUE(version_in_range("^0.2.3", "0.2.9"));
  EXPECT_TRUE(version_in_range("~4.1", "4.1.7"));
  EXPECT_FALSE(version_in_range("~4.1", "4.2.0"));
  EXPECT_TRUE(version_in_range("4.x", "4.0.1"));
  EXPECT_TRUE(version_in_range("4.17", "4.17.21"));
  EXPECT_FALSE(version_in_range("1.2.3", "1.2.4"));
  EXPECT_TRUE(version_in_range("<1 || >=3", "3.1.0"));
  EXPECT_FALSE(version_in_range("<1 || >=3", "2.0.0"));
  EXPECT_TRUE(version_in_range(">= 1.0 < 2", "1.5"));
  EXPECT_TRUE(version_in_range("*", "0.0.1"));
}

TEST(PackagePolicy, RulesSplitNameAndVersionsPerRegistry) {
  auto scoped = rule("npm:@types/node@>=18");
  EXPECT_EQ(scoped.name, "@types/node");
  EXPECT_EQ(scoped.versions, ">=18");
  auto py = rule("pypi:Foo_Bar.baz==1.*");
  EXPECT_EQ(py.name, "foo-bar-baz");
  EXPECT_TRUE(py.matches(Registry::pypi, "foo-bar-baz", "1.4"));
  EXPECT_FALSE(py.matches(Registry::npm, "foo-bar-baz", "1.4"));
  EXPECT_EQ(rule("debian:curl=7.*").versions, "=7.*");
  EXPECT_FALSE(parse_package_rule("requests").has_value());
  EXPECT_FALSE(parse_package_rule("cargo:serde").has_value());
}

TEST(PackagePolicy, DenyWinsOverAllowAndLock) {
  auto p = gateway();
  p.allow = {rule("npm:*")};
  p.deny = {rule("npm:event-stream")};
  p.lock = {parse_lock_entry("npm:event-stream@3.3.6", "sha256:" + std::string(64, 'a')).value()};
  auto d = decide(p, Registry::npm, "event-stream", "3.3.6", kNow - 30 * kDay, kNow);
  EXPECT_FALSE(d.allowed);
  EXPECT_EQ(d.rule, "deny npm:event-stream");
  EXPECT_TRUE(decide(p, Registry::npm, "lodash", "4.17.21", kNow - 30 * kDay, kNow).allowed == false);  // not locked
}

TEST(PackagePolicy, VersionedDenyRefusesOnlyThoseVersions) {
  auto p = gateway();
  p.deny = {rule("pypi:requests==2.31.*")};
  EXPECT_FALSE(decide(p, Registry::pypi, "requests", "2.31.0", std::nullopt, kNow).allowed);
  EXPECT_TRUE(decide(p, Registry::pypi, "requests", "2.32.3", std::nullopt, kNow).allowed);
  EXPECT_TRUE(decide(p, Registry::pypi, "requests", "", std::nullopt, kNow).allowed);  // some version may pass
}

TEST(PackagePolicy, AllowListsOfSessionAndTenantMustBothMatch) {
  auto p = gateway();
  p.ceiling_allow = {rule("pypi:req*")};
  p.allow = {rule("pypi:requests==2.*")};
  EXPECT_TRUE(decide(p, Registry::pypi, "Requests", "2.32.3", std::nullopt, kNow).allowed);
  EXPECT_FALSE(decide(p, Registry::pypi, "requests", "3.0", std::nullopt, kNow).allowed);
  auto other = decide(p, Registry::pypi, "flask", "3.0", std::nullopt, kNow);
  EXPECT_FALSE(other.allowed);
  EXPECT_EQ(other.rule, "tenant allow");
}

TEST(PackagePolicy, LockAllowsOnlyItsVersionsAndCarriesTheHash) {
  auto p = gateway();
  std::string hash(64, 'b');
  p.lock = {parse_lock_entry("pypi:requests==2.32.3", "sha256:" + hash).value()};
  auto d = decide(p, Registry::pypi, "requests", "2.32.3", std::nullopt, kNow);
  ASSERT_TRUE(d.allowed);
  EXPECT_EQ(d.locked_sha256, hash);
  EXPECT_FALSE(decide(p, Registry::pypi, "requests", "2.32.2", std::nullopt, kNow).allowed);
  EXPECT_FALSE(decide(p, Registry::pypi, "idna", "3.7", std::nullopt, kNow).allowed);
  EXPECT_TRUE(decide(p, Registry::npm, "lodash", "4.17.21", std::nullopt, kNow).allowed);  // no npm lock
  EXPECT_FALSE(parse_lock_entry("pypi:requests>=2", "sha256:" + hash).has_value());
  EXPECT_FALSE(parse_lock_entry("pypi:requests==2.32.3", "sha256:XYZ").has_value());
}

TEST(PackagePolicy, CooldownRefusesYoungAndUndatedVersionsButNotDebian) {
  auto p = gateway();
  p.min_age_days = 2;
  EXPECT_TRUE(decide(p, Registry::npm, "x", "1.0.0", kNow - 3 * kDay, kNow).allowed);
  auto young = decide(p, Registry::npm, "x", "2.0.0", kNow - kDay, kNow);
  EXPECT_FALSE(young.allowed);
  EXPECT_EQ(young.rule, "min_age_days 2");
  EXPECT_NE(young.reason.find("release cooldown"), std::string::npos);
  EXPECT_FALSE(decide(p, Registry::pypi, "x", "2.0", std::nullopt, kNow).allowed);
  EXPECT_TRUE(decide(p, Registry::debian, "curl", "7.88.1-10", std::nullopt, kNow).allowed);
}

TEST(PackagePolicy, ModeAndRegistries) {
  PackagePolicy off;
  EXPECT_NE(decide(off, Registry::pypi, "x", "1", std::nullopt, kNow).reason.find("disabled by policy"),
            std::string::npos);
  auto p = gateway();
  p.registries = {Registry::pypi};
  EXPECT_EQ(decide(p, Registry::npm, "x", "1", std::nullopt, kNow).rule, "registries");
}

TEST(PackagePolicy, NarrowingStaysWithinTheCeiling) {
  auto ceiling = gateway();
  ceiling.mode = PackageMode::offline;
  ceiling.min_age_days = 3;
  ceiling.max_download_bytes = 100 << 20;
  ceiling.registries = {Registry::pypi, Registry::npm};
  ceiling.allow = {rule("pypi:*")};
  PackageRequest asked;
  asked.mode = PackageMode::gateway;
  EXPECT_EQ(narrow_policy(ceiling, asked).error().code, ErrorCode::policy_denied);
  asked.mode = PackageMode::offline;
  asked.registries = std::vector{Registry::debian};
  EXPECT_EQ(narrow_policy(ceiling, asked).error().code, ErrorCode::policy_denied);
  asked.registries.reset();
  asked.min_age_days = 1;
  EXPECT_EQ(narrow_policy(ceiling, asked).error().code, ErrorCode::policy_denied);
  asked.min_age_days = 5;
  asked.max_download_mb = 200;
  EXPECT_EQ(narrow_policy(ceiling, asked).error().code, ErrorCode::policy_denied);
  asked.max_download_mb = 50;
  asked.allow = {"pypi:requests"};
  asked.deny = {"pypi:evil"};
  auto p = narrow_policy(ceiling, asked);
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->min_age_days, 5);
  EXPECT_EQ(p->max_download_bytes, 50u << 20);
  EXPECT_EQ(p->ceiling_allow.size(), 1u);
  EXPECT_EQ(p->allow.size(), 1u);
  asked.allow = {"bogus"};
  EXPECT_EQ(narrow_policy(ceiling, asked).error().code, ErrorCode::invalid_argument);
  PackageRequest none;
  EXPECT_EQ(narrow_policy(ceiling, none)->mode, PackageMode::off);  // off unless asked
}

TEST(PackageConfig, MachineUpstreamsComeFromAptNpmAndPip) {
  auto root = std::filesystem::temp_directory_path() / ("cela-machine-" + std::to_string(::getpid()));
  std::filesystem::create_directories(root / "etc/apt/sources.list.d");
  std::filesystem::create_directories(root / "root");
  std::ofstream(root / "etc/apt/sources.list.d/debian.sources")
      << "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
         "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
         "Types: deb\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n";
  std::ofstream(root / "root/.npmrc") << "registry=https://npm.invalid/\n";
  std::ofstream(root / "etc/pip.conf") << "[global]\nindex-url = https://pypi.invalid/simple/\n";
  auto m = machine_upstreams(root.string());
  EXPECT_EQ(m.debian, "https://mirror.invalid/debian");
  EXPECT_EQ(m.debian_suites, (std::vector<std::string>{"bookworm main", "bookworm-updates main"}));
  EXPECT_EQ(m.npm, "https://npm.invalid/");
  EXPECT_EQ(m.pypi, "https://pypi.invalid/simple/");
  std::filesystem::remove_all(root);
  auto empty = machine_upstreams("/nonexistent-cela-root");
  EXPECT_TRUE(empty.debian.empty() && empty.npm.empty() && empty.pypi.empty());
}

TEST(PackageConfig, RequestAndConfigAreStrict) {
  auto body = parse_json_object(R"({"mode": "gateway", "allow": ["pypi:requests==2.*"], "lock": {"pypi:requests==2.32.3": "sha256:)" +
                                std::string(64, 'c') + R"("}, "min_age_days": 2, "max_download_mb": 64})")
                  .value();
  auto r = parse_package_request(JsonFields(body));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(r->mode, PackageMode::gateway);
  EXPECT_EQ(r->lock.size(), 1u);
  auto bad = parse_json_object(R"({"mode": "sometimes"})").value();
  EXPECT_FALSE(parse_package_request(JsonFields(bad)));
  auto typo = parse_json_object(R"({"alow": []})").value();
  EXPECT_FALSE(parse_package_request(JsonFields(typo)));
  auto cfg = parse_json_object(R"({"upstreams": {"pypi": "https://pypi.invalid/simple/"}, "min_age_days": 1,
                                   "max_package_mb": 8, "registries": ["pypi"]})")
                 .value();
  JsonFields f(cfg);
  auto c = parse_packages_config(&f, "/state");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->gateway.cache_dir, "/state/packages");
  EXPECT_EQ(c->ceiling.min_age_days, 1);
  EXPECT_EQ(c->ceiling.max_package_bytes, 8u << 20);
  auto unknown = parse_json_object(R"({"upstream": {}})").value();
  JsonFields u(unknown);
  EXPECT_FALSE(parse_packages_config(&u, "/state"));
}
