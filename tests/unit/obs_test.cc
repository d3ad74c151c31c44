// obs/: the metric registry and its Prometheus text, the audit chain and its verifier,
// the audit log over the real store (append, head, retention anchor), the log lines.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "obs/audit.h"
#include "obs/log.h"
#include "obs/metrics.h"
#include "session/audit_store.h"
#include "store/store.h"

using namespace cela;
namespace json = boost::json;

namespace {

struct TempDir {
  TempDir() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/cela-obs-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

class MemoryBackend final : public obs::AuditBackend {
 public:
  Result<void> append(const obs::AuditRecord& r) override {
    if (refuse) return fail(ErrorCode::capacity_exceeded, "full");
    records.push_back(r);
    return {};
  }
  Result<obs::ChainAnchor> head() override { return obs::ChainAnchor{}; }
  std::vector<obs::AuditRecord> records;
  bool refuse = false;
};

std::vector<std::string> verify(const std::vector<obs::AuditRecord>& records, obs::ChainAnchor anchor = {}) {
  obs::ChainVerifier v(std::move(anchor));
  for (const auto& r : records) v.feed(r);
  return v.problems();
}

std::vector<obs::AuditRecord> chain_of(int n) {
  MemoryBackend b;
  auto log = obs::AuditLog::open(b, {});
  EXPECT_TRUE(log);
  for (int i = 0; i < n; ++i) EXPECT_TRUE((*log)->record("exec.end", {"t-1", "s-1", ""}, {{"i", i}}));
  return b.records;
}

}  // namespace

TEST(Metrics, RendersCountersGaugesHistogramsInTextFormat) {
  obs::Registry r;
  r.counter("t_total", "a counter", {"tenant"}).add({"t-1"}, 2);
  r.gauge("t_gauge", "a gauge").set({}, 1.5);
  auto& h = r.histogram("t_seconds", "a histogram", {"tenant"}, {0.1, 1});
  h.observe({"t-1"}, 0.05);
  h.observe({"t-1"}, 0.5);
  h.observe({"t-1"}, 5);
  std::string text = r.render();
  EXPECT_NE(text.find("# TYPE t_total counter\nt_total{tenant=\"t-1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_gauge 1.5\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{tenant=\"t-1\",le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{tenant=\"t-1\",le=\"1\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_bucket{tenant=\"t-1\",le=\"+Inf\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_count{tenant=\"t-1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("t_seconds_sum{tenant=\"t-1\"} 5.55"), std::string::npos) << text;
}

TEST(Metrics, LabelCardinalityIsBounded) {
  obs::Registry r;
  auto& c = r.counter("flood_total", "x", {"tenant"}, 4);
  for (int i = 0; i < 1000; ++i) c.add({"t-" + std::to_string(i)});
  std::string text = r.render();
  size_t series = 0;
  for (size_t p = text.find("\nflood_total{"); p != std::string::npos; p = text.find("\nflood_total{", p + 1)) ++series;
  EXPECT_LE(series, 5u) << text;
  EXPECT_EQ(c.value({"_other"}), 996);
  EXPECT_EQ(c.value({"t-0"}), 1);
}

TEST(Metrics, LabelValuesAreEscaped) {
  obs::Registry r;
  r.counter("esc_total", "x", {"route"}).add({"a\"b\\c\nd"});
  EXPECT_NE(r.render().find("esc_total{route=\"a\\\"b\\\\c\\nd\"} 1"), std::string::npos);
}

TEST(Metrics, CollectorsRunAtScrape) {
  obs::Registry r;
  int calls = 0;
  r.collector("live", "x", {"state"}, [&] {
    ++calls;
    return std::vector<obs::Collected>{{{"ready"}, 3}};
  });
  EXPECT_NE(r.render().find("live{state=\"ready\"} 3"), std::string::npos);
  EXPECT_EQ(calls, 1);
}

TEST(AuditChain, AnUntouchedChainVerifies) {
  auto c = chain_of(5);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_EQ(c[0].prev_hash, obs::kGenesisHash);
  for (size_t i = 1; i < c.size(); ++i) EXPECT_EQ(c[i].prev_hash, c[i - 1].hash);
  EXPECT_TRUE(verify(c).empty());
}

TEST(AuditChain, RemovalEditAndReorderAreEachCaught) {
  auto c = chain_of(5);
  auto removed = c;
  removed.erase(removed.begin() + 2);
  EXPECT_FALSE(verify(removed).empty());
  auto edited = c;
  edited[3].data = R"({"i":99})";
  auto p = verify(edited);
  ASSERT_FALSE(p.empty());
  EXPECT_NE(p[0].find("edited"), std::string::npos) << p[0];
  auto reordered = c;
  std::swap(reordered[1], reordered[2]);
  EXPECT_FALSE(verify(reordered).empty());
  // Renumbering the swapped pair to look in order is an edit of both.
  std::swap(reordered[1].seq, reordered[2].seq);
  EXPECT_FALSE(verify(reordered).empty());
  // The head cut off cannot be seen without its anchor; with the anchor it verifies.
  std::vector<obs::AuditRecord> tail(c.begin() + 2, c.end());
  EXPECT_FALSE(verify(tail).empty());
  EXPECT_TRUE(verify(tail, {c[1].seq, c[1].hash}).empty());
}

TEST(AuditLog, ARefusedAppendDoesNotAdvanceTheChain) {
  MemoryBackend b;
  auto log = obs::AuditLog::open(b, {});
  ASSERT_TRUE(log);
  ASSERT_TRUE((*log)->record("a", {}, {}));
  b.refuse = true;
  EXPECT_FALSE((*log)->record("b", {}, {}));
  b.refuse = false;
  ASSERT_TRUE((*log)->record("c", {}, {}));
  EXPECT_TRUE(verify(b.records).empty());
  EXPECT_EQ(b.records.back().seq, 2);
}

TEST(AuditLog, SubscribersSeeTheirSessionInOrder) {
  MemoryBackend b;
  auto log = obs::AuditLog::open(b, {});
  std::vector<int64_t> seen;
  auto token = (*log)->subscribe("s-1", [&](const obs::AuditRecord& r) { seen.push_back(r.seq); });
  (void)(*log)->record("x", {"t", "s-1", ""}, {});
  (void)(*log)->record("x", {"t", "s-2", ""}, {});
  (void)(*log)->record("x", {"t", "s-1", ""}, {});
  (*log)->unsubscribe(token);
  (void)(*log)->record("x", {"t", "s-1", ""}, {});
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 3}));
}

TEST(AuditLog, BodyPolicyHashesLongText) {
  MemoryBackend b;
  obs::AuditOptions keep;
  keep.exec_bodies = obs::BodyPolicy::keep;
  auto k = obs::AuditLog::open(b, keep);
  auto h = obs::AuditLog::open(b, {});
  std::string code(500, 'x');
  EXPECT_EQ((*k)->body(code), code);
  EXPECT_EQ((*h)->body(code), obs::body_hash(code));
  EXPECT_EQ((*h)->body("-c"), "-c");
}

TEST(AuditStore, ChainSurvivesReopenAndRetentionMovesTheAnchor) {
  TempDir dir;
  auto store = store::Store::open(dir.path + "/cela.db");
  ASSERT_TRUE(store) << store.error().message();
  {
    session::StoreAuditBackend backend(**store);
    auto log = obs::AuditLog::open(backend, {});
    ASSERT_TRUE(log);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*log)->record("a", {"t-1", "s-1", ""}, {{"i", i}}));
  }
  {
    // A new daemon continues the same chain.
    session::StoreAuditBackend backend(**store);
    auto log = obs::AuditLog::open(backend, {});
    ASSERT_TRUE((*log)->record("b", {"t-1", "s-1", ""}, {}));
  }
  auto ok = session::verify_audit(**store);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->checked, 4);
  EXPECT_TRUE(ok->problems.empty());
  // Everything is "old": all but the newest go, the anchor follows.
  auto purged = (*store)->purge_audit_before(INT64_MAX);
  ASSERT_TRUE(purged);
  EXPECT_EQ(*purged, 3);
  auto after = session::verify_audit(**store);
  ASSERT_TRUE(after);
  EXPECT_TRUE(after->problems.empty());
  EXPECT_EQ(after->anchor_seq, 3);
  // Filters: tenant scoping, kind prefixes.
  store::AuditFilter f;
  f.tenant_id = "t-2";
  EXPECT_TRUE((*store)->list_audit(f)->empty());
  f.tenant_id = "t-1";
  f.kinds = {"b."};
  EXPECT_TRUE((*store)->list_audit(f)->empty());
  f.kinds = {"b"};
  EXPECT_EQ((*store)->list_audit(f)->size(), 1u);
}

TEST(Log, JsonLinesCarryLevelMessageAndFields) {
  obs::json_logs(true);
  auto line = obs::format_line(obs::Level::warn, "hello \"x\"", {{"request_id", "r-1"}, {"status", 404}});
  obs::json_logs(false);
  boost::system::error_code ec;
  auto v = json::parse(line, ec);
  ASSERT_FALSE(ec) << line;
  EXPECT_EQ(v.at("level").as_string(), "warn");
  EXPECT_EQ(v.at("msg").as_string(), "hello \"x\"");
  EXPECT_EQ(v.at("request_id").as_string(), "r-1");
  EXPECT_EQ(v.at("status").as_int64(), 404);
  EXPECT_TRUE(v.at("ts").is_string());
}
