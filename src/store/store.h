// Store: everything the daemon must remember across a restart, in one SQLite file
// under the state dir (tenants, API keys, sessions, execs, the exec output index).
//
// - One connection, WAL journal, synchronous=NORMAL, foreign keys on, busy timeout
//   5 s. The daemon may be killed at any instant: every call is one statement or one
//   transaction, so the file always holds a state some call left behind (the last
//   few commits may be lost on power failure, never on a process kill).
// - Thread-safe: one mutex serialises all calls (a connection cannot interleave two
//   transactions). Calls are short; nothing waits on the sandbox while holding it.
// - The database file (and its -wal/-shm) is mode 0600, opened without following a
//   symlink, and its descriptors are close-on-exec: sandboxes never inherit them.
// - API keys are stored only as sha256 hex; the plaintext is returned once.
// - Tenant scoping: calls taking a tenant_id never see another tenant's rows; a
//   foreign id answers not_found, as for an id that never existed.
// - Errors name the SQL step: "insert session: UNIQUE constraint failed: sessions.id".
//   not_found for missing rows, conflict for a duplicate id or name,
//   invalid_argument for bad input (unknown state, unknown tenant, bad cursor),
//   system for I/O, capacity_exceeded when the state dir is full, internal for the rest.
//
// Schema changes are numbered migrations tracked in PRAGMA user_version; open()
// applies the missing ones, each in its own transaction, and refuses a file written
// by a newer cela.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "store/audit_rows.h"
#include "store/records.h"
#include "store/sqlite.h"

namespace cela::store {

// GET /v1/sessions filters: all given conditions must hold.
struct SessionFilter {
  std::optional<std::string> state;
  std::map<std::string, std::string> metadata;  // metadata.K == V for every entry
  std::vector<std::string> any_state = {};      // when not empty: the state is one of these
};

struct PageRequest {
  int64_t limit = 100;  // 1..1000
  std::string cursor;   // "" = first page; else a next_cursor from the previous page
};

// Newest first (created_at, then id, descending). Paging is stable: a cursor points
// after a row, so rows created meanwhile never shift later pages.
struct SessionPage {
  std::vector<SessionRecord> records;
  std::string next_cursor;  // "" when this is the last page
};

// What live sessions (starting/ready/running/paused) hold, from their limits.
struct Usage {
  int64_t sessions = 0;
  int64_t memory_mb = 0;
  double cpus = 0;
};

class Store {
 public:
  // Opens (creating it mode 0600) the database at `path` and brings its schema up
  // to date. The parent directory must exist.
  static Result<std::unique_ptr<Store>> open(const std::string& path);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // The schema version of the open file (== the newest migration).
  Result<int64_t> schema_version();

  // ---- Tenants ----
  // Names are unique (a duplicate is conflict).
  Result<TenantRecord> create_tenant(std::string_view name, const Quotas& quotas);
  Result<TenantRecord> get_tenant(std::string_view tenant_id);
  Result<std::vector<TenantRecord>> list_tenants();  // oldest first

  // ---- API keys ----
  // A new "cela_<64 hex>" key ("e2b_<64 hex>" for KeyForm::e2b) for an existing tenant;
  // the plaintext is only in the returned value. A host admin key is an admin key too
  // (KeyRecord).
  Result<IssuedKey> create_key(std::string_view tenant_id, bool admin, bool host_admin = false,
                               KeyForm form = KeyForm::cela);
  // The key's record when `key` is a live (not revoked) key, nullopt otherwise.
  // Always hashes the whole input; the lookup is by hash only.
  Result<std::optional<KeyRecord>> authenticate(std::string_view key);
  Result<void> revoke_key(std::string_view key_id);
  // First start: if there is no tenant at all, creates tenant "default" with
  // `quotas` and a host admin key (the operator's), and returns that key's plaintext (for
  // <state-dir>/dev.key, see write_secret_file). Otherwise nullopt, changing nothing.
  Result<std::optional<std::string>> bootstrap(const Quotas& quotas);

  // ---- Sessions ----
  // Inserts a new session. The store holds no policy: admission (session/admission.h)
  // decides whether it may exist, in the same reactor turn as this insert.
  Result<void> insert_session(const SessionRecord& session);
  // Rewrites every column but id, tenant_id and created_at (PATCH, runtime fields).
  // Last writer wins: prefer the targeted setters below for state changes.
  Result<void> update_session(const SessionRecord& session);
  // Moves a live session to another live state. False (and no change) when the
  // session is missing or already final: a final state is never left. Use
  // set_terminated for terminated/failed.
  Result<bool> set_state(std::string_view session_id, std::string_view state);
  // starting -> ready, with ready_at and the create's wall time.
  Result<bool> set_ready(std::string_view session_id, std::string_view ready_at,
                         int64_t startup_ms);
  // Live -> `state` (terminated or failed) with the reason, a message, the cleanup
  // report (may be null) and termination_at = now. False, changing nothing, when
  // the session is already final (idempotent DELETE keeps the first record).
  Result<bool> set_terminated(std::string_view session_id, std::string_view state,
                              std::string_view reason, std::string_view message,
                              const std::optional<CleanupReport>& cleanup);
  // Replaces the cleanup report of a session (e.g. once teardown has finished).
  Result<void> set_cleanup(std::string_view session_id, const CleanupReport& cleanup);
  Result<void> touch_activity(std::string_view session_id, std::string_view at);
  // Tenant-scoped: another tenant's session is not_found.
  Result<SessionRecord> get_session(std::string_view tenant_id, std::string_view session_id);
  // Any tenant, for the daemon's own bookkeeping.
  Result<SessionRecord> get_session_any(std::string_view session_id);
  Result<SessionPage> list_sessions(std::string_view tenant_id, const SessionFilter& filter,
                                    const PageRequest& page);
  // Every live session of every tenant, oldest first: what recovery must adopt or
  // clean at daemon start, and what the reaper watches for ttl/idle expiry.
  Result<std::vector<SessionRecord>> live_sessions();
  // Sums over live sessions of one tenant, or of the whole host when nullopt.
  Result<Usage> live_usage(std::optional<std::string_view> tenant_id);

  // ---- Execs ----
  Result<void> insert_exec(const ExecRecord& exec);
  // Writes the outcome fields of a running exec (state, exit_code, signal, reason,
  // ended_at, duration/cpu/memory, byte counts, truncated, partial). False, changing
  // nothing, when the exec is missing or no longer running (e.g. closed by recovery).
  Result<bool> finish_exec(const ExecRecord& finished);
  // set_output for each of `outputs`, then finish_exec, in one transaction: a finished
  // record always finds its output index, and the exec's end costs one commit.
  Result<bool> finish_exec(const ExecRecord& finished, const std::vector<OutputRecord>& outputs);
  // Scoped by tenant and session: any mismatch is not_found.
  Result<ExecRecord> get_exec(std::string_view tenant_id, std::string_view session_id,
                              std::string_view exec_id);
  Result<std::vector<ExecRecord>> list_execs(std::string_view session_id);  // oldest first
  Result<std::vector<ExecRecord>> running_execs();
  // Marks every running exec (of one session, or of all when session_id is empty)
  // failed with `reason`, ended now; returns how many. Recovery calls it with
  // "daemon restarted": processes do not survive the daemon's init sockets.
  Result<int64_t> close_running_execs(std::string_view reason, std::string_view session_id = {});

  // Deletes sessions that ended before `ended_before` (RFC 3339) with their execs and
  // output index rows; returns the output files they named, for the caller to unlink.
  Result<std::vector<std::string>> purge_ended_before(std::string_view ended_before);
  // ---- Warm pools (session/pool.cc): sessions booted ahead, owned by no tenant ----
  // Recorded before the boot starts, so recovery finds what a crash left (pooled_ids).
  Result<void> insert_pooled(std::string_view id, std::string_view template_name);
  Result<void> remove_pooled(std::string_view id);
  Result<std::vector<std::string>> pooled_ids();
  // A pooled sandbox becomes `session` (of its tenant): the session row inserted and
  // the pooled row removed in one transaction.
  Result<void> claim_pooled(const SessionRecord& session);
  // ---- Egress (store/egress_store.cc) ----
  Result<void> insert_egress(const EgressRecord& record);
  // Oldest first; `cursor` is a next_cursor of the previous page ("" = the first).
  Result<std::pair<std::vector<EgressRecord>, std::string>> list_egress(std::string_view session_id,
                                                                        const PageRequest& page);
  Result<void> insert_limit_event(std::string_view session_id, const LimitEventRecord& event);
  Result<std::vector<LimitEventRecord>> list_egress_limit_events(std::string_view session_id);
  // nullopt: the tenant has no ceiling. not_found for an unknown tenant.
  Result<std::optional<NetworkCeiling>> network_ceiling(std::string_view tenant_id);
  Result<void> set_network_ceiling(std::string_view tenant_id, const std::optional<NetworkCeiling>& ceiling);
  // ---- Secrets (sealed values only) ----
  // Inserts or replaces (tenant_id, name).
  Result<void> put_secret(const SecretRecord& secret);
  // Rows whose expires_at is before `now` (RFC 3339) are deleted first, then the
  // tenant's secrets by name.
  Result<std::vector<SecretRecord>> list_secrets(std::string_view tenant_id, std::string_view now);
  // not_found when missing or expired at `now`.
  Result<SecretRecord> get_secret(std::string_view tenant_id, std::string_view name, std::string_view now);
  // False when there was none.
  Result<bool> delete_secret(std::string_view tenant_id, std::string_view name);

  // ---- Exec output index (the bytes live in files the session layer writes) ----
  // Inserts or replaces the (exec_id, stream) entry; the exec must exist.
  Result<void> set_output(const OutputRecord& output);
  // The exec's entries, stderr before stdout; empty when none were recorded.
  Result<std::vector<OutputRecord>> get_output(std::string_view exec_id);

  // ---- Audit log (store/audit.cc; the chain itself is obs/audit.h's) ----
  Result<void> append_audit(const AuditRow& row);
  // The newest row, or nullopt when the table is empty.
  Result<std::optional<AuditRow>> last_audit();
  // Where the chain starts (seq 0 and "" when nothing was ever purged).
  Result<AuditRow> audit_anchor();
  // Rows matching `filter`, oldest first.
  Result<std::vector<AuditRow>> list_audit(const AuditFilter& filter);
  // Deletes rows older than `before_ms` (never the newest one) and moves the anchor to
  // the last row deleted, in one transaction; returns how many.
  Result<int64_t> purge_audit_before(int64_t before_ms);

  // ---- Package installs (store/package_installs.cc) ----
  Result<void> insert_package_install(const PackageInstallRecord& install);
  // One session's, oldest first; the session must be the tenant's (else not_found).
  Result<PackageInstallPage> list_package_installs(std::string_view tenant_id, std::string_view session_id,
                                                   const PageRequest& page);

 private:
  explicit Store(Db db) : db_(std::move(db)) {}
  Result<void> migrate();
  Result<void> insert_session_locked(const SessionRecord& session, const std::string& step);
  Result<IssuedKey> insert_key_locked(std::string_view tenant_id, bool admin, bool host_admin,
                                      KeyForm form = KeyForm::cela);
  Result<TenantRecord> insert_tenant_locked(std::string_view name, const Quotas& quotas);
  Result<Usage> live_usage_locked(std::optional<std::string_view> tenant_id);
  Result<bool> finish_exec_locked(const ExecRecord& finished);
  Result<void> set_output_locked(const OutputRecord& output);
  Result<std::vector<SessionRecord>> query_sessions(Stmt& stmt);
  Result<std::vector<ExecRecord>> query_execs(Stmt& stmt);

  std::mutex mu_;
  Db db_;
};

// Writes `text` to `path` as a new 0600 file: a temporary sibling opened with
// O_CREAT|O_EXCL|O_NOFOLLOW, fsync'd, then renamed over `path`. A symlink at `path`
// is replaced, never followed. For <state-dir>/dev.key.
Result<void> write_secret_file(const std::string& path, std::string_view text);

}  // namespace cela::store
