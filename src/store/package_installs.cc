// Package install records (Store, store.h): one row per install attempt the package
// gateway saw, kept with the session's other records (deleted with it).
#include <charconv>

#include "store/store.h"

namespace cela::store {

Result<void> Store::insert_package_install(const PackageInstallRecord& i) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      "INSERT INTO package_installs (session_id, tenant_id, at, manager, name, version, registry, sha256, size, "
      "verdict, rule, reason, cache_hit) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
      "insert package install of session " + i.session_id);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(i.session_id, i.tenant_id, i.at, i.manager, i.name, i.version, i.registry, i.sha256, i.size, i.verdict,
             i.rule, i.reason, i.cache_hit);
  return stmt->run();
}

Result<PackageInstallPage> Store::list_package_installs(std::string_view tenant_id, std::string_view session_id,
                                                        const PageRequest& page) {
  if (page.limit < 1 || page.limit > 1000)
    return fail(ErrorCode::invalid_argument, "list package installs: limit must be 1..1000");
  int64_t after = 0;
  if (!page.cursor.empty()) {
    auto [end, ec] = std::from_chars(page.cursor.data(), page.cursor.data() + page.cursor.size(), after);
    if (ec != std::errc() || end != page.cursor.data() + page.cursor.size())
      return fail(ErrorCode::invalid_argument, "list package installs: invalid cursor");
  }
  std::lock_guard lock(mu_);
  auto owner = db_.prepare("SELECT 1 FROM sessions WHERE id = ? AND tenant_id = ?", "find session");
  if (!owner) return std::unexpected(owner.error());
  owner->bind(session_id, tenant_id);
  auto found = owner->step();
  if (!found) return std::unexpected(found.error());
  if (!*found) return fail(ErrorCode::not_found, "no session " + std::string(session_id));
  auto stmt = db_.prepare(
      "SELECT seq, session_id, tenant_id, at, manager, name, version, registry, sha256, size, verdict, rule, reason, "
      "cache_hit FROM package_installs WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
      "list package installs of session " + std::string(session_id));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(session_id, after, page.limit + 1);
  PackageInstallPage out;
  for (;;) {
    auto row = stmt->step();
    if (!row) return std::unexpected(row.error());
    if (!*row) break;
    Row r(*stmt);
    PackageInstallRecord i;
    i.seq = r.int64();
    i.session_id = r.text();
    i.tenant_id = r.text();
    i.at = r.text();
    i.manager = r.text();
    i.name = r.text();
    i.version = r.text();
    i.registry = r.text();
    i.sha256 = r.text();
    i.size = r.int64();
    i.verdict = r.text();
    i.rule = r.text();
    i.reason = r.text();
    i.cache_hit = r.boolean();
    out.records.push_back(std::move(i));
  }
  if (static_cast<int64_t>(out.records.size()) > page.limit) {
    out.records.pop_back();
    out.next_cursor = std::to_string(out.records.back().seq);
  }
  return out;
}

}  // namespace cela::store
