#include "session/audit_store.h"

namespace cela::session {

namespace {
store::AuditRow to_row(const obs::AuditRecord& r) {
  return {r.seq, r.at_ms, r.at, r.tenant_id, r.session_id, r.exec_id, r.kind, r.data, r.prev_hash, r.hash};
}
}  // namespace

obs::AuditRecord to_audit_record(store::AuditRow a) {
  obs::AuditRecord r;
  r.seq = a.seq;
  r.at_ms = a.at_ms;
  r.at = std::move(a.at);
  r.tenant_id = std::move(a.tenant_id);
  r.session_id = std::move(a.session_id);
  r.exec_id = std::move(a.exec_id);
  r.kind = std::move(a.kind);
  r.data = std::move(a.data);
  r.prev_hash = std::move(a.prev_hash);
  r.hash = std::move(a.hash);
  return r;
}

Result<void> StoreAuditBackend::append(const obs::AuditRecord& record) { return store_.append_audit(to_row(record)); }

Result<obs::ChainAnchor> StoreAuditBackend::head() {
  auto last = store_.last_audit();
  if (!last) return std::unexpected(last.error());
  if (*last) return obs::ChainAnchor{(*last)->seq, (*last)->hash};
  auto anchor = store_.audit_anchor();
  if (!anchor) return std::unexpected(anchor.error());
  if (anchor->hash.empty()) return obs::ChainAnchor{};
  return obs::ChainAnchor{anchor->seq, anchor->hash};
}

Result<AuditVerification> verify_audit(store::Store& store) {
  auto anchor = store.audit_anchor();
  if (!anchor) return std::unexpected(anchor.error());
  obs::ChainAnchor start;
  if (!anchor->hash.empty()) start = {anchor->seq, anchor->hash};
  AuditVerification out;
  out.anchor_seq = start.seq;
  obs::ChainVerifier verifier(start);
  store::AuditFilter page;
  page.limit = 5000;
  page.after_seq = -1;  // every row, whatever its seq (an edited seq must show too)
  for (;;) {
    auto rows = store.list_audit(page);
    if (!rows) return std::unexpected(rows.error());
    if (rows->empty()) break;
    page.after_seq = rows->back().seq;
    for (auto& row : *rows) verifier.feed(to_audit_record(std::move(row)));
    if (static_cast<int64_t>(rows->size()) < page.limit) break;
  }
  out.checked = verifier.checked();
  out.problems = verifier.problems();
  return out;
}

}  // namespace cela::session
