// The egress part of the Store (store.h "Egress"): connection attempts, egress limit
// events and tenants' network ceilings (migration 5).
#include <charconv>

#include "common/json_fields.h"
#include "common/json_text.h"
#include "store/store.h"

namespace cela::store {
namespace json = boost::json;

namespace {

constexpr std::string_view kEgressColumns =
    "seq, session_id, tenant_id, at, kind, host, ip, port, verdict, rule, reason, bytes_up, bytes_down, duration_ms";

json::array strings(const std::vector<std::string>& v) {
  json::array a;
  for (const auto& s : v) a.emplace_back(s);
  return a;
}

}  // namespace

Result<void> Store::insert_egress(const EgressRecord& r) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      "INSERT INTO egress_connections (session_id, tenant_id, at, kind, host, ip, port, verdict, rule, reason, "
      "bytes_up, bytes_down, duration_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      "insert egress record");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(r.session_id, r.tenant_id, r.at, r.kind, r.host, NullIfEmpty{r.ip}, r.port,
             r.allowed ? "allowed" : "denied", NullIfEmpty{r.rule}, NullIfEmpty{r.reason}, r.bytes_up, r.bytes_down,
             r.duration_ms);
  return stmt->run();
}

Result<std::pair<std::vector<EgressRecord>, std::string>> Store::list_egress(std::string_view session_id,
                                                                             const PageRequest& page) {
  if (page.limit < 1 || page.limit > 1000) return fail(ErrorCode::invalid_argument, "limit must be 1..1000");
  int64_t after = 0;
  if (!page.cursor.empty()) {
    auto [p, ec] = std::from_chars(page.cursor.data(), page.cursor.data() + page.cursor.size(), after);
    if (ec != std::errc{} || p != page.cursor.data() + page.cursor.size() || after < 0)
      return fail(ErrorCode::invalid_argument, "list egress: invalid cursor");
  }
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("SELECT " + std::string(kEgressColumns) +
                              " FROM egress_connections WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                          "list egress");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(session_id, after, page.limit + 1);
  std::vector<EgressRecord> out;
  std::vector<int64_t> seqs;
  for (;;) {
    auto row = stmt->step();
    if (!row) return std::unexpected(row.error());
    if (!*row) break;
    Row r(*stmt);
    seqs.push_back(r.int64());
    EgressRecord e;
    e.session_id = r.text();
    e.tenant_id = r.text();
    e.at = r.text();
    e.kind = r.text();
    e.host = r.text();
    e.ip = r.text();
    e.port = r.int64();
    e.allowed = r.text() == "allowed";
    e.rule = r.text();
    e.reason = r.text();
    e.bytes_up = r.int64();
    e.bytes_down = r.int64();
    e.duration_ms = r.int64();
    out.push_back(std::move(e));
  }
  std::string next;
  if (static_cast<int64_t>(out.size()) > page.limit) {
    out.pop_back();
    next = std::to_string(seqs[out.size() - 1]);
  }
  return std::make_pair(std::move(out), next);
}

Result<void> Store::insert_limit_event(std::string_view session_id, const LimitEventRecord& e) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("INSERT INTO egress_limit_events (session_id, at, kind, detail) VALUES (?, ?, ?, ?)",
                          "insert egress limit event");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(session_id, e.at, e.kind, e.detail);
  return stmt->run();
}

Result<std::vector<LimitEventRecord>> Store::list_egress_limit_events(std::string_view session_id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("SELECT at, kind, detail FROM egress_limit_events WHERE session_id = ? ORDER BY seq",
                          "list egress limit events");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(session_id);
  std::vector<LimitEventRecord> out;
  for (;;) {
    auto row = stmt->step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return out;
    Row r(*stmt);
    LimitEventRecord e;
    e.at = r.text();
    e.kind = r.text();
    e.detail = r.text();
    out.push_back(std::move(e));
  }
}

Result<std::optional<NetworkCeiling>> Store::network_ceiling(std::string_view tenant_id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("SELECT network_ceiling FROM tenants WHERE id = ?", "get network ceiling");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(tenant_id);
  auto row = stmt->step();
  if (!row) return std::unexpected(row.error());
  if (!*row) return fail(ErrorCode::not_found, "tenant " + std::string(tenant_id) + ": not found");
  std::string text = Row(*stmt).text();
  if (text.empty()) return std::optional<NetworkCeiling>{};
  auto o = parse_json_object(text, "network ceiling");
  if (!o) return std::unexpected(o.error());
  JsonFields f(*o);
  NetworkCeiling c;
  auto allow = f.string_array("allow");
  if (!allow) return std::unexpected(allow.error());
  auto deny = f.string_array("deny");
  if (!deny) return std::unexpected(deny.error());
  if (*allow) c.allow = **allow;
  if (*deny) c.deny = **deny;
  return std::optional<NetworkCeiling>(std::move(c));
}

Result<void> Store::set_network_ceiling(std::string_view tenant_id, const std::optional<NetworkCeiling>& ceiling) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("UPDATE tenants SET network_ceiling = ? WHERE id = ?", "set network ceiling");
  if (!stmt) return std::unexpected(stmt.error());
  std::string text;
  if (ceiling) text = json::serialize(json::object{{"allow", strings(ceiling->allow)}, {"deny", strings(ceiling->deny)}});
  stmt->bind(NullIfEmpty{text}, tenant_id);
  if (auto r = stmt->run(); !r) return r;
  if (stmt->changes() == 0) return fail(ErrorCode::not_found, "tenant " + std::string(tenant_id) + ": not found");
  return {};
}

}  // namespace cela::store
