#include "store/store.h"

#include "store/record_columns.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <iterator>

#include "common/encoding.h"
#include "common/fd.h"
#include "common/random.h"
#include "common/sha256.h"

namespace cela::store {

namespace json = boost::json;

namespace {

// ---- Schema ----

// Migration N (1-based) brings the schema from user_version N-1 to N. Append only:
// a released migration is never edited.
constexpr std::string_view kMigrations[] = {
    // 1: everything.
    R"sql(
CREATE TABLE tenants (
  id            TEXT PRIMARY KEY,
  name          TEXT NOT NULL UNIQUE,
  max_sessions  INTEGER NOT NULL DEFAULT 0,   -- 0 = unlimited
  max_memory_mb INTEGER NOT NULL DEFAULT 0,
  max_cpus      REAL NOT NULL DEFAULT 0,
  created_at    TEXT NOT NULL
) STRICT;

CREATE TABLE api_keys (
  id         TEXT PRIMARY KEY,
  tenant_id  TEXT NOT NULL REFERENCES tenants(id),
  hash       TEXT NOT NULL UNIQUE,            -- sha256 hex; the key itself is never stored
  admin      INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  revoked    INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX api_keys_by_tenant ON api_keys(tenant_id);

CREATE TABLE sessions (
  id                  TEXT PRIMARY KEY,
  tenant_id           TEXT NOT NULL REFERENCES tenants(id),
  state               TEXT NOT NULL CHECK (state IN
                        ('starting', 'ready', 'running', 'paused', 'terminated', 'failed')),
  template_ref        TEXT NOT NULL,
  limits              TEXT NOT NULL DEFAULT '{}',   -- JSON object
  network             TEXT NOT NULL DEFAULT '{}',   -- JSON object
  metadata            TEXT NOT NULL DEFAULT '{}',   -- JSON object of strings
  spec                TEXT NOT NULL DEFAULT '{}',   -- JSON object
  created_at          TEXT NOT NULL,
  created_ms          INTEGER NOT NULL,             -- created_at as epoch ms, for ordering
  ready_at            TEXT,
  expires_at          TEXT,
  last_activity_at    TEXT,
  idle_timeout_s      INTEGER NOT NULL DEFAULT 0,
  startup_ms          INTEGER,
  slot                INTEGER NOT NULL DEFAULT -1,
  cgroup              TEXT,
  init_pid            INTEGER NOT NULL DEFAULT 0,
  termination_reason  TEXT,
  termination_at      TEXT,
  termination_message TEXT,
  cleanup             TEXT                          -- JSON, the DELETE report
) STRICT;
CREATE INDEX sessions_by_tenant ON sessions(tenant_id, created_ms DESC, id DESC);
CREATE INDEX sessions_by_state ON sessions(state);

CREATE TABLE execs (
  id                TEXT PRIMARY KEY,
  session_id        TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  tenant_id         TEXT NOT NULL REFERENCES tenants(id),
  argv              TEXT NOT NULL DEFAULT '[]',     -- JSON array of strings
  cmd               TEXT,
  cwd               TEXT NOT NULL,
  user_name         TEXT NOT NULL,
  state             TEXT NOT NULL CHECK (state IN
                      ('running', 'exited', 'killed', 'timed_out', 'oom_killed', 'failed')),
  exit_code         INTEGER,
  signal            INTEGER,
  reason            TEXT,
  started_at        TEXT NOT NULL,
  started_ms        INTEGER NOT NULL,
  ended_at          TEXT,
  duration_ms       INTEGER,
  cpu_ms            INTEGER,
  peak_memory_bytes INTEGER,
  stdout_bytes      INTEGER NOT NULL DEFAULT 0,
  stderr_bytes      INTEGER NOT NULL DEFAULT 0,
  output_truncated  INTEGER NOT NULL DEFAULT 0,
  partial           INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX execs_by_session ON execs(session_id, started_ms, id);
CREATE INDEX execs_by_state ON execs(state);

CREATE TABLE exec_output (
  exec_id   TEXT NOT NULL REFERENCES execs(id) ON DELETE CASCADE,
  stream    TEXT NOT NULL CHECK (stream IN ('stdout', 'stderr')),
  path      TEXT NOT NULL,
  bytes     INTEGER NOT NULL DEFAULT 0,
  truncated INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (exec_id, stream)
) STRICT;
)sql",
    // 2: the exec's pid inside the sandbox (E2B and the process API key by it).
    R"sql(
ALTER TABLE execs ADD COLUMN pid INTEGER NOT NULL DEFAULT 0;
)sql",
    // 3: the most processes an exec had alive at once.
    R"sql(
ALTER TABLE execs ADD COLUMN pids_peak INTEGER;
)sql",
    // 4: host admin keys. Only they act across tenants; before this every admin key
    // did, so the operator's own (the first tenant's admin keys) keep that power and
    // other tenants' admin keys become tenant admins.
    R"sql(
ALTER TABLE api_keys ADD COLUMN host_admin INTEGER NOT NULL DEFAULT 0;
UPDATE api_keys SET host_admin = 1
  WHERE admin = 1 AND tenant_id IN (SELECT id FROM tenants WHERE name = 'default');
)sql",
    // 5: tenant secrets, sealed by the session layer (never plaintext).
    R"sql(
CREATE TABLE secrets (
  tenant_id  TEXT NOT NULL REFERENCES tenants(id),
  name       TEXT NOT NULL,
  sealed     TEXT NOT NULL,
  set_by     TEXT NOT NULL,
  created_at TEXT NOT NULL,
  expires_at TEXT,
  ttl_s      INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (tenant_id, name)
) STRICT;
)sql",
    // 6: warm pools' sandboxes, booted ahead and owned by no tenant until a create
    // claims one (it then becomes a row of sessions with the same id).
    R"sql(
CREATE TABLE pooled_sessions (
  id         TEXT PRIMARY KEY,
  template   TEXT NOT NULL,
  created_at TEXT NOT NULL
) STRICT;
)sql",
    // 7: the hash-chained audit log (obs/audit.h). No foreign keys: records outlive
    // the sessions they are about (their own retention). audit_anchor is where the
    // chain starts once the retention purge removed its oldest records.
    R"sql(
CREATE TABLE audit (
  seq        INTEGER PRIMARY KEY,
  at_ms      INTEGER NOT NULL,
  at         TEXT NOT NULL,
  tenant_id  TEXT NOT NULL,
  session_id TEXT NOT NULL DEFAULT '',
  exec_id    TEXT NOT NULL DEFAULT '',
  kind       TEXT NOT NULL,
  data       TEXT NOT NULL,
  prev_hash  TEXT NOT NULL,
  hash       TEXT NOT NULL
) STRICT;
CREATE INDEX audit_by_tenant ON audit(tenant_id, seq);
CREATE INDEX audit_by_session ON audit(session_id, seq);
CREATE TABLE audit_anchor (
  id   INTEGER PRIMARY KEY CHECK (id = 1),
  seq  INTEGER NOT NULL,
  hash TEXT NOT NULL
) STRICT;
)sql",
    // 8: egress: every connection attempt through a session's door, the limits its
    // traffic hit, and the tenants' network ceilings (JSON {"allow", "deny"}; NULL =
    // no ceiling). See store/egress_store.cc.
    R"sql(
CREATE TABLE egress_connections (
  seq         INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id  TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  tenant_id   TEXT NOT NULL,
  at          TEXT NOT NULL,
  kind        TEXT NOT NULL,
  host        TEXT NOT NULL,
  ip          TEXT,
  port        INTEGER NOT NULL,
  verdict     TEXT NOT NULL CHECK (verdict IN ('allowed', 'denied')),
  rule        TEXT,
  reason      TEXT,
  bytes_up    INTEGER NOT NULL DEFAULT 0,
  bytes_down  INTEGER NOT NULL DEFAULT 0,
  duration_ms INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX egress_by_session ON egress_connections(session_id, seq);
CREATE TABLE egress_limit_events (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  at         TEXT NOT NULL,
  kind       TEXT NOT NULL,
  detail     TEXT NOT NULL
) STRICT;
CREATE INDEX egress_limits_by_session ON egress_limit_events(session_id, seq);
ALTER TABLE tenants ADD COLUMN network_ceiling TEXT;
)sql",
    // 9: package installs through the gateway (store/package_installs.cc).
    R"sql(
CREATE TABLE package_installs (
  seq        INTEGER PRIMARY KEY AUTOINCREMENT,
  session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
  tenant_id  TEXT NOT NULL,
  at         TEXT NOT NULL,
  manager    TEXT NOT NULL,
  name       TEXT NOT NULL,
  version    TEXT NOT NULL,
  registry   TEXT NOT NULL,
  sha256     TEXT NOT NULL,
  size       INTEGER NOT NULL,
  verdict    TEXT NOT NULL,
  rule       TEXT NOT NULL,
  reason     TEXT NOT NULL,
  cache_hit  INTEGER NOT NULL
) STRICT;
CREATE INDEX package_installs_by_session ON package_installs(session_id, seq);
)sql",
};
constexpr int64_t kSchemaVersion = std::size(kMigrations);

constexpr std::string_view kLiveStates = "('starting', 'ready', 'running', 'paused')";

constexpr std::string_view kTenantColumns =
    "id, name, max_sessions, max_memory_mb, max_cpus, created_at";
constexpr std::string_view kKeyColumns = "id, tenant_id, admin, created_at, revoked, host_admin";
constexpr std::string_view kSessionColumns =
    "id, tenant_id, state, template_ref, limits, network, metadata, spec, created_at, "
    "ready_at, expires_at, last_activity_at, idle_timeout_s, startup_ms, slot, cgroup, "
    "init_pid, termination_reason, termination_at, termination_message, cleanup";
constexpr std::string_view kExecColumns =
    "id, session_id, tenant_id, argv, cmd, cwd, user_name, state, exit_code, signal, reason, "
    "started_at, ended_at, duration_ms, cpu_ms, peak_memory_bytes, stdout_bytes, "
    "stderr_bytes, output_truncated, partial, pid, pids_peak";

std::string select_from(std::string_view columns, std::string_view rest) {
  std::string sql = "SELECT ";
  sql += columns;
  sql += ' ';
  sql += rest;
  return sql;
}

// ---- Encoding helpers ----

// The paging cursor: opaque to clients, "<created_ms>:<id>" in hex inside.
std::string encode_cursor(int64_t created_ms, const std::string& id) {
  std::string raw = std::to_string(created_ms) + ":" + id;
  return hex_encode(raw);
}

Result<std::pair<int64_t, std::string>> decode_cursor(std::string_view cursor) {
  auto bad = [] { return fail(ErrorCode::invalid_argument, "list sessions: invalid cursor"); };
  auto raw = hex_decode(cursor);
  if (!raw) return bad();
  const size_t colon = raw->find(':');
  if (colon == std::string::npos || colon + 1 == raw->size()) return bad();
  int64_t created_ms = 0;
  auto [end, ec] = std::from_chars(raw->data(), raw->data() + colon, created_ms);
  if (ec != std::errc() || end != raw->data() + colon) return bad();
  return std::pair{created_ms, raw->substr(colon + 1)};
}

std::string dump_metadata(const std::map<std::string, std::string>& metadata) {
  json::object o;
  for (const auto& [key, value] : metadata) o[key] = value;
  return json::serialize(o);
}

std::string dump_argv(const std::vector<std::string>& argv) {
  json::array a;
  for (const auto& arg : argv) a.emplace_back(arg);
  return json::serialize(a);
}

Result<json::value> parse_json(std::string_view text, const std::string& what) {
  if (text.empty()) return json::value(nullptr);
  boost::system::error_code ec;
  json::value value = json::parse(text, ec);
  if (ec) return fail(ErrorCode::internal, what + ": stored JSON is corrupt: " + ec.message());
  return value;
}

Result<json::object> parse_object(std::string_view text, const std::string& what) {
  auto value = parse_json(text, what);
  if (!value) return std::unexpected(value.error());
  if (value->is_null()) return json::object();
  if (!value->is_object()) return fail(ErrorCode::internal, what + ": stored JSON is no object");
  return std::move(value->as_object());
}

// ---- Row readers (columns in the order of the k*Columns lists) ----

TenantRecord read_tenant(Stmt& stmt) {
  Row r(stmt);
  TenantRecord t;
  t.id = r.text();
  t.name = r.text();
  t.quotas.max_sessions = r.int64();
  t.quotas.max_memory_mb = r.int64();
  t.quotas.max_cpus = r.real();
  t.created_at = r.text();
  return t;
}

KeyRecord read_key(Stmt& stmt) {
  Row r(stmt);
  KeyRecord k;
  k.id = r.text();
  k.tenant_id = r.text();
  k.admin = r.boolean();
  k.created_at = r.text();
  k.revoked = r.boolean();
  k.host_admin = r.boolean();
  return k;
}

Result<SessionRecord> read_session(Stmt& stmt) {
  Row r(stmt);
  SessionRecord s;
  s.id = r.text();
  const std::string what = "session " + s.id;
  s.tenant_id = r.text();
  s.state = r.text();
  s.template_ref = r.text();
  auto limits = read_limits_column(r.text());
  auto network = read_network_column(r.text());
  auto metadata = parse_object(r.text(), what + " metadata");
  auto spec = read_spec_column(r.text());
  if (!limits) return std::unexpected(limits.error());
  if (!network) return std::unexpected(network.error());
  if (!metadata) return std::unexpected(metadata.error());
  if (!spec) return std::unexpected(spec.error());
  s.limits = *limits;
  s.network = std::move(*network);
  for (const auto& [key, value] : *metadata) {
    s.metadata[std::string(key)] =
        value.is_string() ? std::string(value.get_string()) : json::serialize(value);
  }
  s.spec = std::move(*spec);
  s.created_at = r.text();
  s.ready_at = r.text();
  s.expires_at = r.text();
  s.last_activity_at = r.text();
  s.idle_timeout_s = r.int64();
  s.startup_ms = r.optional_int64();
  s.slot = r.int64();
  s.cgroup = r.text();
  s.init_pid = r.int64();
  s.termination_reason = r.text();
  s.termination_at = r.text();
  s.termination_message = r.text();
  if (std::string text = r.text(); !text.empty()) {
    auto cleanup = read_cleanup_column(text);
    if (!cleanup) return std::unexpected(cleanup.error());
    s.cleanup = std::move(*cleanup);
  }
  return s;
}

Result<ExecRecord> read_exec(Stmt& stmt) {
  Row r(stmt);
  ExecRecord e;
  e.id = r.text();
  e.session_id = r.text();
  e.tenant_id = r.text();
  auto argv = parse_json(r.text(), "exec " + e.id + " argv");
  if (!argv) return std::unexpected(argv.error());
  if (const json::array* a = argv->if_array()) {
    for (const auto& arg : *a) {
      if (arg.is_string()) e.argv.emplace_back(arg.get_string());
    }
  }
  e.cmd = r.text();
  e.cwd = r.text();
  e.user = r.text();
  e.state = r.text();
  e.exit_code = r.optional_int64();
  e.signal = r.optional_int64();
  e.reason = r.text();
  e.started_at = r.text();
  e.ended_at = r.text();
  e.duration_ms = r.optional_int64();
  e.cpu_ms = r.optional_int64();
  e.peak_memory_bytes = r.optional_int64();
  e.stdout_bytes = r.int64();
  e.stderr_bytes = r.int64();
  e.output_truncated = r.boolean();
  e.partial = r.boolean();
  e.pid = r.int64();
  e.pids_peak = r.optional_int64();
  return e;
}

Error not_found(std::string what) {
  return Error{ErrorCode::not_found, 0, std::move(what) + ": not found"};
}

// Gives an existing file at `path` mode 0600 without following a symlink; an absent
// file is fine.
Result<void> restrict_mode(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return {};
    return sys_fail("open " + path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys_fail("stat " + path);
  if (!S_ISREG(st.st_mode)) return fail(ErrorCode::invalid_argument, path + ": not a regular file");
  if ((st.st_mode & 07777) != 0600 && ::fchmod(fd.get(), 0600) != 0) {
    return sys_fail("chmod 0600 " + path);
  }
  return {};
}

}  // namespace

// ---- Open and migrate ----

Result<std::unique_ptr<Store>> Store::open(const std::string& path) {
  // Create the file ourselves so it is 0600 from the first byte: SQLite would use
  // 0644, and it gives the -wal and -shm files the main file's mode.
  {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!fd) return sys_fail("create database " + path);
  }
  for (const char* suffix : {"", "-wal", "-shm"}) {
    if (auto r = restrict_mode(path + suffix); !r) return std::unexpected(r.error());
  }

  // NOMUTEX: Store's own mutex serialises every use of the connection.
  auto db = Db::open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX |
                               SQLITE_OPEN_NOFOLLOW);
  if (!db) return std::unexpected(db.error());
  sqlite3_busy_timeout(db->get(), 5000);
  if (auto r = db->exec("PRAGMA foreign_keys = ON", "enable foreign keys"); !r) {
    return std::unexpected(r.error());
  }
  {
    auto mode = db->prepare("PRAGMA journal_mode = WAL", "set journal_mode WAL");
    if (!mode) return std::unexpected(mode.error());
    auto row = mode->step();
    if (!row) return std::unexpected(row.error());
    if (!*row || Row(*mode).text() != "wal") {
      return fail(ErrorCode::system, "set journal_mode WAL on " + path + ": refused");
    }
  }
  if (auto r = db->exec("PRAGMA synchronous = NORMAL", "set synchronous NORMAL"); !r) {
    return std::unexpected(r.error());
  }

  std::unique_ptr<Store> store(new Store(std::move(*db)));
  if (auto r = store->migrate(); !r) return std::unexpected(r.error());
  return store;
}

Result<void> Store::migrate() {
  for (;;) {
    // Version read and migration in one write transaction: two processes opening a
    // fresh file at once apply each migration exactly once.
    auto tx = Transaction::begin(db_, "migrate schema");
    if (!tx) return std::unexpected(tx.error());
    auto read = db_.query_int64("PRAGMA user_version", "read schema version");
    if (!read) return std::unexpected(read.error());
    const int64_t version = *read;
    if (version > kSchemaVersion) {
      return fail(ErrorCode::invalid_argument, "database schema version " +
                                                   std::to_string(version) +
                                                   " is newer than this cela understands (" +
                                                   std::to_string(kSchemaVersion) + ")");
    }
    if (version == kSchemaVersion) return tx->commit();
    const std::string step = "migrate schema to version " + std::to_string(version + 1);
    if (auto r = db_.exec(kMigrations[version], step); !r) return r;
    if (auto r = db_.exec("PRAGMA user_version = " + std::to_string(version + 1), step); !r) {
      return r;
    }
    if (auto r = tx->commit(); !r) return r;
  }
}

Result<int64_t> Store::schema_version() {
  std::lock_guard lock(mu_);
  return db_.query_int64("PRAGMA user_version", "read schema version");
}

// ---- Tenants ----

Result<TenantRecord> Store::insert_tenant_locked(std::string_view name, const Quotas& quotas) {
  if (name.empty()) return fail(ErrorCode::invalid_argument, "create tenant: empty name");
  TenantRecord t{new_id("t"), std::string(name), quotas, now_rfc3339()};
  auto stmt = db_.prepare(
      "INSERT INTO tenants (" + std::string(kTenantColumns) + ") VALUES (?, ?, ?, ?, ?, ?)",
      "create tenant " + t.name);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(t.id, t.name, t.quotas.max_sessions, t.quotas.max_memory_mb, t.quotas.max_cpus,
             t.created_at);
  if (auto r = stmt->run(); !r) return std::unexpected(r.error());
  return t;
}

Result<TenantRecord> Store::create_tenant(std::string_view name, const Quotas& quotas) {
  std::lock_guard lock(mu_);
  return insert_tenant_locked(name, quotas);
}

Result<TenantRecord> Store::get_tenant(std::string_view tenant_id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(select_from(kTenantColumns, "FROM tenants WHERE id = ?"), "get tenant");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(tenant_id);
  auto row = stmt->step();
  if (!row) return std::unexpected(row.error());
  if (!*row) return std::unexpected(not_found("tenant " + std::string(tenant_id)));
  return read_tenant(*stmt);
}

Result<std::vector<TenantRecord>> Store::list_tenants() {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(select_from(kTenantColumns, "FROM tenants ORDER BY created_at, rowid"),
                          "list tenants");
  if (!stmt) return std::unexpected(stmt.error());
  std::vector<TenantRecord> tenants;
  for (;;) {
    auto row = stmt->step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return tenants;
    tenants.push_back(read_tenant(*stmt));
  }
}

// ---- API keys ----

Result<IssuedKey> Store::insert_key_locked(std::string_view tenant_id, bool admin, bool host_admin, KeyForm form) {
  IssuedKey issued{new_id("k"), (form == KeyForm::e2b ? "e2b_" : "cela_") + hex_encode(random_bytes(32))};
  auto stmt = db_.prepare(
      "INSERT INTO api_keys (" + std::string(kKeyColumns) + ", hash) VALUES (?, ?, ?, ?, 0, ?, ?)",
      "create key");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(issued.id, tenant_id, admin || host_admin, now_rfc3339(), host_admin, sha256_hex(issued.key));
  if (auto r = stmt->run(); !r) return std::unexpected(r.error());
  return issued;
}

Result<IssuedKey> Store::create_key(std::string_view tenant_id, bool admin, bool host_admin, KeyForm form) {
  std::lock_guard lock(mu_);
  {
    auto stmt = db_.prepare("SELECT 1 FROM tenants WHERE id = ?", "create key: find tenant");
    if (!stmt) return std::unexpected(stmt.error());
    stmt->bind(tenant_id);
    auto row = stmt->step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return std::unexpected(not_found("create key: tenant " + std::string(tenant_id)));
  }
  return insert_key_locked(tenant_id, admin, host_admin, form);
}

Result<std::optional<KeyRecord>> Store::authenticate(std::string_view key) {
  // The whole input is hashed, whatever it looks like, and found by its hash alone:
  // no prefix of the key is ever compared.
  const std::string hash = sha256_hex(key);
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(select_from(kKeyColumns, "FROM api_keys WHERE hash = ? AND revoked = 0"),
                          "authenticate key");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(hash);
  auto row = stmt->step();
  if (!row) return std::unexpected(row.error());
  if (!*row) return std::optional<KeyRecord>();
  return std::optional<KeyRecord>(read_key(*stmt));
}

Result<void> Store::revoke_key(std::string_view key_id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("UPDATE api_keys SET revoked = 1 WHERE id = ?", "revoke key");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(key_id);
  if (auto r = stmt->run(); !r) return r;
  if (stmt->changes() == 0) return std::unexpected(not_found("key " + std::string(key_id)));
  return {};
}

Result<std::optional<std::string>> Store::bootstrap(const Quotas& quotas) {
  std::lock_guard lock(mu_);
  auto tx = Transaction::begin(db_, "bootstrap");
  if (!tx) return std::unexpected(tx.error());
  auto tenants = db_.query_int64("SELECT count(*) FROM tenants", "bootstrap: count tenants");
  if (!tenants) return std::unexpected(tenants.error());
  if (*tenants > 0) return std::optional<std::string>();
  auto tenant = insert_tenant_locked("default", quotas);
  if (!tenant) return std::unexpected(tenant.error());
  auto key = insert_key_locked(tenant->id, /*admin=*/true, /*host_admin=*/true);
  if (!key) return std::unexpected(key.error());
  if (auto r = tx->commit(); !r) return std::unexpected(r.error());
  return std::optional<std::string>(std::move(key->key));
}

// ---- Sessions ----

Result<Usage> Store::live_usage_locked(std::optional<std::string_view> tenant_id) {
  std::string sql =
      "SELECT count(*), coalesce(sum(json_extract(limits, '$.memory_mb')), 0), "
      "coalesce(sum(json_extract(limits, '$.cpus')), 0) FROM sessions WHERE state IN ";
  sql += kLiveStates;
  if (tenant_id) sql += " AND tenant_id = ?";
  auto stmt = db_.prepare(sql, "sum live sessions");
  if (!stmt) return std::unexpected(stmt.error());
  if (tenant_id) stmt->bind(*tenant_id);
  if (auto row = stmt->step(); !row) return std::unexpected(row.error());
  Row r(*stmt);
  Usage usage;
  usage.sessions = r.int64();
  usage.memory_mb = static_cast<int64_t>(r.real());
  usage.cpus = r.real();
  return usage;
}

Result<Usage> Store::live_usage(std::optional<std::string_view> tenant_id) {
  std::lock_guard lock(mu_);
  return live_usage_locked(tenant_id);
}

Result<void> Store::insert_session(const SessionRecord& s) {
  const std::string step = "insert session " + s.id;
  if (!is_session_state(s.state)) {
    return fail(ErrorCode::invalid_argument, step + ": unknown state '" + s.state + "'");
  }
  std::lock_guard lock(mu_);
  auto tx = Transaction::begin(db_, step);
  if (!tx) return std::unexpected(tx.error());
  if (auto r = insert_session_locked(s, step); !r) return r;
  return tx->commit();
}

Result<void> Store::insert_session_locked(const SessionRecord& s, const std::string& step) {
  auto created_ms = parse_rfc3339(s.created_at);
  if (!created_ms)
    return fail(ErrorCode::invalid_argument, step + ": created_at: " + created_ms.error().context);
  auto stmt = db_.prepare("INSERT INTO sessions (" + std::string(kSessionColumns) +
                              ", created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                              "?, ?, ?, ?, ?, ?, ?, ?)",
                          step);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(s.id, s.tenant_id, s.state, s.template_ref, limits_column(s.limits), network_column(s.network),
             dump_metadata(s.metadata), spec_column(s.spec), s.created_at, NullIfEmpty{s.ready_at},
             NullIfEmpty{s.expires_at}, NullIfEmpty{s.last_activity_at}, s.idle_timeout_s,
             s.startup_ms, s.slot, NullIfEmpty{s.cgroup}, s.init_pid,
             NullIfEmpty{s.termination_reason}, NullIfEmpty{s.termination_at},
             NullIfEmpty{s.termination_message},
             s.cleanup ? std::optional(cleanup_column(*s.cleanup)) : std::nullopt, *created_ms);
  return stmt->run();
}

Result<void> Store::insert_pooled(std::string_view id, std::string_view template_name) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("INSERT INTO pooled_sessions (id, template, created_at) VALUES (?, ?, ?)",
                          "insert pooled session " + std::string(id));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(id, template_name, now_rfc3339());
  return stmt->run();
}

Result<void> Store::remove_pooled(std::string_view id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("DELETE FROM pooled_sessions WHERE id = ?", "remove pooled session " + std::string(id));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(id);
  return stmt->run();
}

Result<std::vector<std::string>> Store::pooled_ids() {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("SELECT id FROM pooled_sessions ORDER BY created_at", "list pooled sessions");
  if (!stmt) return std::unexpected(stmt.error());
  std::vector<std::string> ids;
  for (;;) {
    auto row = stmt->step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return ids;
    Row r(*stmt);
    ids.push_back(r.text());
  }
}

Result<void> Store::claim_pooled(const SessionRecord& s) {
  const std::string step = "claim pooled session " + s.id;
  if (!is_session_state(s.state)) return fail(ErrorCode::invalid_argument, step + ": unknown state '" + s.state + "'");
  std::lock_guard lock(mu_);
  auto tx = Transaction::begin(db_, step);
  if (!tx) return std::unexpected(tx.error());
  auto del = db_.prepare("DELETE FROM pooled_sessions WHERE id = ?", step);
  if (!del) return std::unexpected(del.error());
  del->bind(s.id);
  if (auto r = del->run(); !r) return r;
  if (del->changes() != 1) return fail(ErrorCode::internal, step + ": no such pooled session");
  if (auto r = insert_session_locked(s, step); !r) return r;
  return tx->commit();
}

Result<void> Store::update_session(const SessionRecord& s) {
  const std::string step = "update session " + s.id;
  if (!is_session_state(s.state)) {
    return fail(ErrorCode::invalid_argument, step + ": unknown state '" + s.state + "'");
  }
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      "UPDATE sessions SET state = ?, template_ref = ?, limits = ?, network = ?, metadata = ?, "
      "spec = ?, ready_at = ?, expires_at = ?, last_activity_at = ?, idle_timeout_s = ?, "
      "startup_ms = ?, slot = ?, cgroup = ?, init_pid = ?, termination_reason = ?, "
      "termination_at = ?, termination_message = ?, cleanup = ? WHERE id = ?",
      step);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(s.state, s.template_ref, limits_column(s.limits), network_column(s.network), dump_metadata(s.metadata),
             spec_column(s.spec), NullIfEmpty{s.ready_at}, NullIfEmpty{s.expires_at},
             NullIfEmpty{s.last_activity_at}, s.idle_timeout_s, s.startup_ms, s.slot,
             NullIfEmpty{s.cgroup}, s.init_pid, NullIfEmpty{s.termination_reason},
             NullIfEmpty{s.termination_at}, NullIfEmpty{s.termination_message},
             s.cleanup ? std::optional(cleanup_column(*s.cleanup)) : std::nullopt, s.id);
  if (auto r = stmt->run(); !r) return r;
  if (stmt->changes() == 0) return std::unexpected(not_found("session " + s.id));
  return {};
}

Result<bool> Store::set_state(std::string_view session_id, std::string_view state) {
  const std::string step = "set state of session " + std::string(session_id);
  if (!is_live_session_state(state)) {
    return fail(ErrorCode::invalid_argument,
                step + ": '" + std::string(state) + "' is not a live state");
  }
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      "UPDATE sessions SET state = ? WHERE id = ? AND state IN " + std::string(kLiveStates), step);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(state, session_id);
  if (auto r = stmt->run(); !r) return std::unexpected(r.error());
  return stmt->changes() > 0;
}

Result<bool> Store::set_ready(std::string_view session_id, std::string_view ready_at,
                              int64_t startup_ms) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      "UPDATE sessions SET state = 'ready', ready_at = ?, startup_ms = ?, "
      "last_activity_at = coalesce(last_activity_at, ?) WHERE id = ? AND state = 'starting'",
      "set session " + std::string(session_id) + " ready");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(ready_at, startup_ms, ready_at, session_id);
  if (auto r = stmt->run(); !r) return std::unexpected(r.error());
  return stmt->changes() > 0;
}

Result<bool> Store::set_terminated(std::string_view session_id, std::string_view state,
                                   std::string_view reason, std::string_view message,
                                   const std::optional<CleanupReport>& cleanup) {
  const std::string step = "terminate session " + std::string(session_id);
  if (state != session_state::terminated && state != session_state::failed) {
    return fail(ErrorCode::invalid_argument,
                step + ": '" + std::string(state) + "' is not a final state");
  }
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      "UPDATE sessions SET state = ?, termination_reason = ?, termination_message = ?, "
      "termination_at = ?, cleanup = ? WHERE id = ? AND state IN " +
          std::string(kLiveStates),
      step);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(state, NullIfEmpty{reason}, NullIfEmpty{message}, now_rfc3339(),
             cleanup ? std::optional(cleanup_column(*cleanup)) : std::nullopt, session_id);
  if (auto r = stmt->run(); !r) return std::unexpected(r.error());
  return stmt->changes() > 0;
}

Result<void> Store::set_cleanup(std::string_view session_id, const CleanupReport& cleanup) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("UPDATE sessions SET cleanup = ? WHERE id = ?",
                          "set cleanup of session " + std::string(session_id));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(cleanup_column(cleanup), session_id);
  if (auto r = stmt->run(); !r) return r;
  if (stmt->changes() == 0) return std::unexpected(not_found("session " + std::string(session_id)));
  return {};
}

Result<void> Store::touch_activity(std::string_view session_id, std::string_view at) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("UPDATE sessions SET last_activity_at = ? WHERE id = ?",
                          "touch session " + std::string(session_id));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(at, session_id);
  if (auto r = stmt->run(); !r) return r;
  if (stmt->changes() == 0) return std::unexpected(not_found("session " + std::string(session_id)));
  return {};
}

Result<std::vector<SessionRecord>> Store::query_sessions(Stmt& stmt) {
  std::vector<SessionRecord> records;
  for (;;) {
    auto row = stmt.step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return records;
    auto record = read_session(stmt);
    if (!record) return std::unexpected(record.error());
    records.push_back(std::move(*record));
  }
}

Result<SessionRecord> Store::get_session(std::string_view tenant_id, std::string_view session_id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      select_from(kSessionColumns, "FROM sessions WHERE id = ? AND tenant_id = ?"), "get session");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(session_id, tenant_id);
  auto records = query_sessions(*stmt);
  if (!records) return std::unexpected(records.error());
  if (records->empty()) return std::unexpected(not_found("session " + std::string(session_id)));
  return std::move(records->front());
}

Result<SessionRecord> Store::get_session_any(std::string_view session_id) {
  std::lock_guard lock(mu_);
  auto stmt =
      db_.prepare(select_from(kSessionColumns, "FROM sessions WHERE id = ?"), "get session");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(session_id);
  auto records = query_sessions(*stmt);
  if (!records) return std::unexpected(records.error());
  if (records->empty()) return std::unexpected(not_found("session " + std::string(session_id)));
  return std::move(records->front());
}

Result<SessionPage> Store::list_sessions(std::string_view tenant_id, const SessionFilter& filter,
                                         const PageRequest& page) {
  if (page.limit < 1 || page.limit > 1000) {
    return fail(ErrorCode::invalid_argument,
                "list sessions: limit must be 1..1000, not " + std::to_string(page.limit));
  }
  if (filter.state && !is_session_state(*filter.state)) {
    return fail(ErrorCode::invalid_argument,
                "list sessions: unknown state '" + *filter.state + "'");
  }
  for (const auto& s : filter.any_state)
    if (!is_session_state(s)) return fail(ErrorCode::invalid_argument, "list sessions: unknown state '" + s + "'");
  std::optional<std::pair<int64_t, std::string>> after;
  if (!page.cursor.empty()) {
    auto decoded = decode_cursor(page.cursor);
    if (!decoded) return std::unexpected(decoded.error());
    after = std::move(*decoded);
  }

  // Newest first; (created_ms, id) is unique, so "after the cursor row" is exact.
  std::string sql = select_from(kSessionColumns, "FROM sessions WHERE tenant_id = ?");
  if (filter.state) sql += " AND state = ?";
  if (!filter.any_state.empty()) {
    sql += " AND state IN (?";
    for (size_t i = 1; i < filter.any_state.size(); ++i) sql += ", ?";
    sql += ")";
  }
  if (after) sql += " AND (created_ms, id) < (?, ?)";
  for (size_t i = 0; i < filter.metadata.size(); ++i) {
    // json_each rather than a JSON path: metadata keys may hold any character.
    sql += " AND EXISTS (SELECT 1 FROM json_each(sessions.metadata) WHERE key = ? AND value = ?)";
  }
  sql += " ORDER BY created_ms DESC, id DESC LIMIT ?";

  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(sql, "list sessions");
  if (!stmt) return std::unexpected(stmt.error());
  int index = 0;
  stmt->bind_at(++index, tenant_id);
  if (filter.state) stmt->bind_at(++index, *filter.state);
  for (const auto& s : filter.any_state) stmt->bind_at(++index, s);
  if (after) {
    stmt->bind_at(++index, after->first);
    stmt->bind_at(++index, after->second);
  }
  for (const auto& [key, value] : filter.metadata) {
    stmt->bind_at(++index, key);
    stmt->bind_at(++index, value);
  }
  stmt->bind_at(++index, page.limit + 1);  // one extra row tells whether a next page exists

  auto records = query_sessions(*stmt);
  if (!records) return std::unexpected(records.error());
  SessionPage result;
  if (static_cast<int64_t>(records->size()) > page.limit) {
    records->pop_back();
    const SessionRecord& last = records->back();
    auto last_ms = parse_rfc3339(last.created_at);  // valid: checked on insert
    if (!last_ms) return std::unexpected(last_ms.error());
    result.next_cursor = encode_cursor(*last_ms, last.id);
  }
  result.records = std::move(*records);
  return result;
}

Result<std::vector<SessionRecord>> Store::live_sessions() {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      select_from(kSessionColumns, "FROM sessions WHERE state IN " + std::string(kLiveStates) +
                                       " ORDER BY created_ms, id"),
      "list live sessions");
  if (!stmt) return std::unexpected(stmt.error());
  return query_sessions(*stmt);
}

// ---- Execs ----

Result<void> Store::insert_exec(const ExecRecord& e) {
  const std::string step = "insert exec " + e.id;
  auto started_ms = parse_rfc3339(e.started_at);
  if (!started_ms)
    return fail(ErrorCode::invalid_argument, step + ": started_at: " + started_ms.error().context);
  if (!is_exec_state(e.state)) {
    return fail(ErrorCode::invalid_argument, step + ": unknown state '" + e.state + "'");
  }
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("INSERT INTO execs (" + std::string(kExecColumns) +
                              ", started_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                              "?, ?, ?, ?, ?, ?, ?, ?)",
                          step);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(e.id, e.session_id, e.tenant_id, dump_argv(e.argv), NullIfEmpty{e.cmd}, e.cwd, e.user,
             e.state, e.exit_code, e.signal, NullIfEmpty{e.reason}, e.started_at,
             NullIfEmpty{e.ended_at}, e.duration_ms, e.cpu_ms, e.peak_memory_bytes, e.stdout_bytes,
             e.stderr_bytes, e.output_truncated, e.partial, e.pid, e.pids_peak, *started_ms);
  return stmt->run();
}

Result<bool> Store::finish_exec(const ExecRecord& e) {
  std::lock_guard lock(mu_);
  return finish_exec_locked(e);
}

Result<bool> Store::finish_exec(const ExecRecord& e, const std::vector<OutputRecord>& outputs) {
  std::lock_guard lock(mu_);
  auto txn = Transaction::begin(db_, "finish exec " + e.id);
  if (!txn) return std::unexpected(txn.error());
  for (const OutputRecord& o : outputs)
    if (auto r = set_output_locked(o); !r) return std::unexpected(r.error());
  auto finished = finish_exec_locked(e);
  if (!finished) return finished;
  if (auto r = txn->commit(); !r) return std::unexpected(r.error());
  return finished;
}

Result<bool> Store::finish_exec_locked(const ExecRecord& e) {
  const std::string step = "finish exec " + e.id;
  if (!is_exec_state(e.state) || e.state == exec_state::running) {
    return fail(ErrorCode::invalid_argument,
                step + ": '" + e.state + "' is not a final exec state");
  }
  const int64_t now = now_ms();
  // ended_at defaults to now, duration_ms to ended - started.
  auto stmt = db_.prepare(
      "UPDATE execs SET state = ?, exit_code = ?, signal = ?, reason = ?, ended_at = ?, "
      "duration_ms = coalesce(?, max(0, ? - started_ms)), cpu_ms = ?, peak_memory_bytes = ?, "
      "stdout_bytes = ?, stderr_bytes = ?, output_truncated = ?, partial = ?, pid = ?, pids_peak = ? "
      "WHERE id = ? AND state = 'running'",
      step);
  if (!stmt) return std::unexpected(stmt.error());
  int64_t ended_ms = now;
  if (!e.ended_at.empty()) {
    auto parsed = parse_rfc3339(e.ended_at);
    if (!parsed)
      return fail(ErrorCode::invalid_argument, step + ": ended_at: " + parsed.error().context);
    ended_ms = *parsed;
  }
  stmt->bind(e.state, e.exit_code, e.signal, NullIfEmpty{e.reason},
             e.ended_at.empty() ? format_rfc3339(now) : e.ended_at, e.duration_ms, ended_ms,
             e.cpu_ms, e.peak_memory_bytes, e.stdout_bytes, e.stderr_bytes, e.output_truncated,
             e.partial, e.pid, e.pids_peak, e.id);
  if (auto r = stmt->run(); !r) return std::unexpected(r.error());
  return stmt->changes() > 0;
}

Result<std::vector<ExecRecord>> Store::query_execs(Stmt& stmt) {
  std::vector<ExecRecord> records;
  for (;;) {
    auto row = stmt.step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return records;
    auto record = read_exec(stmt);
    if (!record) return std::unexpected(record.error());
    records.push_back(std::move(*record));
  }
}

Result<ExecRecord> Store::get_exec(std::string_view tenant_id, std::string_view session_id,
                                   std::string_view exec_id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      select_from(kExecColumns, "FROM execs WHERE id = ? AND session_id = ? AND tenant_id = ?"),
      "get exec");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(exec_id, session_id, tenant_id);
  auto records = query_execs(*stmt);
  if (!records) return std::unexpected(records.error());
  if (records->empty()) return std::unexpected(not_found("exec " + std::string(exec_id)));
  return std::move(records->front());
}

Result<std::vector<ExecRecord>> Store::list_execs(std::string_view session_id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      select_from(kExecColumns, "FROM execs WHERE session_id = ? ORDER BY started_ms, id"),
      "list execs");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(session_id);
  return query_execs(*stmt);
}

Result<std::vector<ExecRecord>> Store::running_execs() {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      select_from(kExecColumns, "FROM execs WHERE state = 'running' ORDER BY started_ms, id"),
      "list running execs");
  if (!stmt) return std::unexpected(stmt.error());
  return query_execs(*stmt);
}

Result<int64_t> Store::close_running_execs(std::string_view reason, std::string_view session_id) {
  const int64_t now = now_ms();
  std::string sql =
      "UPDATE execs SET state = 'failed', reason = ?, ended_at = ?, "
      "duration_ms = max(0, ? - started_ms) WHERE state = 'running'";
  if (!session_id.empty()) sql += " AND session_id = ?";
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(sql, "close running execs");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(NullIfEmpty{reason}, format_rfc3339(now), now);
  if (!session_id.empty()) stmt->bind_at(4, session_id);
  if (auto r = stmt->run(); !r) return std::unexpected(r.error());
  return stmt->changes();
}

Result<std::vector<std::string>> Store::purge_ended_before(std::string_view ended_before) {
  std::lock_guard lock(mu_);
  const std::string old = "SELECT id FROM sessions WHERE state IN ('terminated', 'failed') AND termination_at < ?";
  std::vector<std::string> paths;
  {
    auto stmt = db_.prepare("SELECT o.path FROM exec_output o JOIN execs e ON e.id = o.exec_id WHERE e.session_id IN (" +
                                old + ")",
                            "list output of ended sessions");
    if (!stmt) return std::unexpected(stmt.error());
    stmt->bind(ended_before);
    for (;;) {
      auto row = stmt->step();
      if (!row) return std::unexpected(row.error());
      if (!*row) break;
      Row r(*stmt);
      paths.push_back(r.text());
    }
  }
  // execs and exec_output go with their session (ON DELETE CASCADE).
  auto del = db_.prepare("DELETE FROM sessions WHERE id IN (" + old + ")", "purge ended sessions");
  if (!del) return std::unexpected(del.error());
  del->bind(ended_before);
  if (auto r = del->run(); !r) return std::unexpected(r.error());
  return paths;
}

// ---- Exec output index ----

Result<void> Store::set_output(const OutputRecord& o) {
  std::lock_guard lock(mu_);
  return set_output_locked(o);
}

Result<void> Store::set_output_locked(const OutputRecord& o) {
  auto stmt = db_.prepare(
      "INSERT OR REPLACE INTO exec_output (exec_id, stream, path, bytes, truncated) "
      "VALUES (?, ?, ?, ?, ?)",
      "set " + o.stream + " output of exec " + o.exec_id);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(o.exec_id, o.stream, o.path, o.bytes, o.truncated);
  return stmt->run();
}

Result<std::vector<OutputRecord>> Store::get_output(std::string_view exec_id) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(
      "SELECT exec_id, stream, path, bytes, truncated FROM exec_output WHERE exec_id = ? "
      "ORDER BY stream",
      "get output of exec " + std::string(exec_id));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(exec_id);
  std::vector<OutputRecord> outputs;
  for (;;) {
    auto row = stmt->step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return outputs;
    Row r(*stmt);
    OutputRecord o;
    o.exec_id = r.text();
    o.stream = r.text();
    o.path = r.text();
    o.bytes = r.int64();
    o.truncated = r.boolean();
    outputs.push_back(std::move(o));
  }
}

// ---- Secrets ----

namespace {
SecretRecord read_secret(const Stmt& stmt) {
  Row r(stmt);
  SecretRecord s;
  s.tenant_id = r.text();
  s.name = r.text();
  s.sealed = r.text();
  s.set_by = r.text();
  s.created_at = r.text();
  s.expires_at = r.text();
  s.ttl_s = r.int64();
  return s;
}
constexpr std::string_view kSecretColumns = "tenant_id, name, sealed, set_by, created_at, expires_at, ttl_s";
}  // namespace

Result<void> Store::put_secret(const SecretRecord& s) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("INSERT OR REPLACE INTO secrets (" + std::string(kSecretColumns) +
                              ") VALUES (?, ?, ?, ?, ?, ?, ?)",
                          "put secret " + s.name);
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(s.tenant_id, s.name, s.sealed, s.set_by, s.created_at, NullIfEmpty{s.expires_at}, s.ttl_s);
  return stmt->run();
}

Result<std::vector<SecretRecord>> Store::list_secrets(std::string_view tenant_id, std::string_view now) {
  std::lock_guard lock(mu_);
  auto purge = db_.prepare("DELETE FROM secrets WHERE expires_at IS NOT NULL AND expires_at < ?", "purge secrets");
  if (!purge) return std::unexpected(purge.error());
  purge->bind(now);
  if (auto r = purge->run(); !r) return std::unexpected(r.error());
  auto stmt = db_.prepare(select_from(kSecretColumns, "FROM secrets WHERE tenant_id = ? ORDER BY name"),
                          "list secrets");
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(tenant_id);
  std::vector<SecretRecord> out;
  for (;;) {
    auto row = stmt->step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return out;
    out.push_back(read_secret(*stmt));
  }
}

Result<SecretRecord> Store::get_secret(std::string_view tenant_id, std::string_view name, std::string_view now) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare(select_from(kSecretColumns,
                                      "FROM secrets WHERE tenant_id = ? AND name = ? AND "
                                      "(expires_at IS NULL OR expires_at >= ?)"),
                          "get secret " + std::string(name));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(tenant_id, name, now);
  auto row = stmt->step();
  if (!row) return std::unexpected(row.error());
  if (!*row) return std::unexpected(not_found("secret " + std::string(name)));
  return read_secret(*stmt);
}

Result<bool> Store::delete_secret(std::string_view tenant_id, std::string_view name) {
  std::lock_guard lock(mu_);
  auto stmt = db_.prepare("DELETE FROM secrets WHERE tenant_id = ? AND name = ?", "delete secret " + std::string(name));
  if (!stmt) return std::unexpected(stmt.error());
  stmt->bind(tenant_id, name);
  if (auto r = stmt->run(); !r) return std::unexpected(r.error());
  return stmt->changes() > 0;
}

// ---- Secret files ----

Result<void> write_secret_file(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp-" + new_id("w");
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return sys_fail("create " + tmp);
  auto abandon = [&](std::string step) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return sys_fail(std::move(step), err);
  };
  // The umask cannot widen 0600, but a restrictive one could narrow it; be exact.
  if (::fchmod(fd.get(), 0600) != 0) return abandon("chmod 0600 " + tmp);
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return abandon("write " + tmp);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) return abandon("fsync " + tmp);
  fd.reset();
  // rename(2) replaces a symlink at `path` itself; it never writes through it.
  if (::rename(tmp.c_str(), path.c_str()) != 0) return abandon("rename " + tmp + " to " + path);
  return {};
}

}  // namespace cela::store
