// The audit table (Store's audit methods; store.h documents them).
#include "store/store.h"
#include "store/sqlite.h"

namespace cela::store {

namespace {
constexpr std::string_view kAuditColumns = "seq, at_ms, at, tenant_id, session_id, exec_id, kind, data, prev_hash, hash";

AuditRow read_row(const Stmt& stmt) {
  Row r(stmt);
  AuditRow a;
  a.seq = r.int64();
  a.at_ms = r.int64();
  a.at = r.text();
  a.tenant_id = r.text();
  a.session_id = r.text();
  a.exec_id = r.text();
  a.kind = r.text();
  a.data = r.text();
  a.prev_hash = r.text();
  a.hash = r.text();
  return a;
}

Result<std::vector<AuditRow>> read_rows(Stmt& stmt) {
  std::vector<AuditRow> rows;
  for (;;) {
    auto more = stmt.step();
    if (!more) return std::unexpected(more.error());
    if (!*more) return rows;
    rows.push_back(read_row(stmt));
  }
}
}  // namespace

Result<void> Store::append_audit(const AuditRow& a) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("INSERT INTO audit (" + std::string(kAuditColumns) + ") VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                          "append audit record " + std::to_string(a.seq));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(a.seq, a.at_ms, a.at, a.tenant_id, a.session_id, a.exec_id, a.kind, a.data, a.prev_hash, a.hash);
  return stmt->run();
}

Result<std::optional<AuditRow>> Store::last_audit() {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("SELECT " + std::string(kAuditColumns) + " FROM audit ORDER BY seq DESC LIMIT 1",
                          "read the last audit record");
  if (!stmt) return std::unexpected(stmt.error());
  auto rows = read_rows(*stmt);
  if (!rows) return std::unexpected(rows.error());
  if (rows->empty()) return std::optional<AuditRow>();
  return std::optional<AuditRow>(std::move(rows->front()));
}

Result<AuditRow> Store::audit_anchor() {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("SELECT seq, hash FROM audit_anchor WHERE id = 1", "read the audit anchor");
  if (!stmt) return std::unexpected(stmt.error());
  AuditRow anchor;
  auto more = stmt->step();
  if (!more) return std::unexpected(more.error());
  if (*more) {
    Row r(*stmt);
    anchor.seq = r.int64();
    anchor.hash = r.text();
  }
  return anchor;
}

Result<std::vector<AuditRow>> Store::list_audit(const AuditFilter& f) {
  std::string sql = "SELECT " + std::string(kAuditColumns) + " FROM audit WHERE seq > ?";
  if (f.tenant_id) sql += " AND tenant_id = ?";
  if (f.session_id) sql += " AND session_id = ?";
  if (f.since_ms) sql += " AND at_ms >= ?";
  if (!f.kinds.empty()) {
    sql += " AND (";
    for (size_t i = 0; i < f.kinds.size(); ++i) {
      if (i) sql += " OR ";
      // A prefix ("limit.") matches its kinds; the text is compared, never globbed.
      sql += f.kinds[i].ends_with('.') ? "substr(kind, 1, ?) = ?" : "kind = ?";
    }
    sql += ")";
  }
  sql += " ORDER BY seq LIMIT ?";
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(sql, "list audit records");
  if (!stmt) return std::unexpected(stmt.error());
  int i = 0;
  stmt->bind_at(++i, f.after_seq);
  if (f.tenant_id) stmt->bind_at(++i, *f.tenant_id);
  if (f.session_id) stmt->bind_at(++i, *f.session_id);
  if (f.since_ms) stmt->bind_at(++i, *f.since_ms);
  for (const auto& k : f.kinds) {
    if (k.ends_with('.')) stmt->bind_at(++i, static_cast<int64_t>(k.size()));
    stmt->bind_at(++i, k);
  }
  stmt->bind_at(++i, f.limit);
  return read_rows(*stmt);
}

Result<int64_t> Store::purge_audit_before(int64_t before_ms) {
  std::lock_guard lock(mu_);
  auto tx = Transaction::begin(db_, "purge audit records");
  if (!tx) return std::unexpected(tx.error());
  // The newest record always stays: it is the head the next record chains to.
  int64_t seq = 0;
  std::string hash;
  {  // finished before the delete
    auto last = db_.prepare(
        "SELECT seq, hash FROM audit WHERE at_ms < ? AND seq < (SELECT max(seq) FROM audit) ORDER BY seq DESC LIMIT 1",
        "find the last audit record to purge");
    if (!last) return std::unexpected(last.error());
    last->bind(before_ms);
    auto more = last->step();
    if (!more) return std::unexpected(more.error());
    if (!*more) return int64_t{0};
    Row r(*last);
    seq = r.int64();
    hash = r.text();
  }
  auto del = db_.prepare("DELETE FROM audit WHERE seq <= ?", "purge audit records");
  if (!del) return std::unexpected(del.error());
  del->bind(seq);
  if (auto d = del->run(); !d) return std::unexpected(d.error());
  int64_t removed = del->changes();
  auto anchor = db_.prepare("INSERT OR REPLACE INTO audit_anchor (id, seq, hash) VALUES (1, ?, ?)", "move the audit anchor");
  if (!anchor) return std::unexpected(anchor.error());
  anchor->bind(seq, hash);
  if (auto a = anchor->run(); !a) return std::unexpected(a.error());
  if (auto c = tx->commit(); !c) return std::unexpected(c.error());
  return removed;
}

}  // namespace cela::store
