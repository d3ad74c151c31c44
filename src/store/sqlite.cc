#include "store/sqlite.h"

#include <cerrno>
#include <utility>

namespace cela::store {

Error sqlite_error(sqlite3* db, int rc, std::string_view step) {
  std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  std::string context = std::string(step) + ": " + message;
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      // A duplicate (name, id) is a conflict; FOREIGN KEY, CHECK, NOT NULL are bad input.
      if (rc == SQLITE_CONSTRAINT_UNIQUE || rc == SQLITE_CONSTRAINT_PRIMARYKEY) {
        return Error{ErrorCode::conflict, 0, std::move(context)};
      }
      return Error{ErrorCode::invalid_argument, 0, std::move(context)};
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return Error{ErrorCode::system, 0, std::move(context)};
    case SQLITE_FULL:
      // The state dir is full: nothing was written; retry once there is room.
      return Error{ErrorCode::capacity_exceeded, ENOSPC, "the state directory is full (" + context + ")"};
    case SQLITE_IOERR:
      if (db != nullptr && (sqlite3_system_errno(db) == ENOSPC || sqlite3_system_errno(db) == EDQUOT))
        return Error{ErrorCode::capacity_exceeded, sqlite3_system_errno(db),
                     "the state directory is full (" + context + ")"};
      [[fallthrough]];
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_PERM:
      return Error{ErrorCode::system, db != nullptr ? sqlite3_system_errno(db) : 0,
                   std::move(context)};
    default:
      return Error{ErrorCode::internal, 0, std::move(context)};
  }
}

// ---- Stmt ----

Stmt::Stmt(Stmt&& other) noexcept
    : db_(other.db_),
      stmt_(std::exchange(other.stmt_, nullptr)),
      step_(std::move(other.step_)),
      cached_(std::exchange(other.cached_, nullptr)),
      bind_rc_(other.bind_rc_) {}

Stmt::~Stmt() {
  if (stmt_ == nullptr) return;
  if (cached_ == nullptr) {
    sqlite3_finalize(stmt_);
    return;
  }
  // Reset ends any read it had open (an unfinished read would block COMMIT).
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
  cached_->in_use = false;
}

void Stmt::bind_at(int index, std::string_view value) {
  int rc =
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
}

void Stmt::bind_at(int index, NullIfEmpty value) {
  if (value.text.empty()) {
    bind_at(index, std::nullopt);
  } else {
    bind_at(index, value.text);
  }
}

void Stmt::bind_at(int index, int64_t value) {
  int rc = sqlite3_bind_int64(stmt_, index, value);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
}

void Stmt::bind_at(int index, double value) {
  int rc = sqlite3_bind_double(stmt_, index, value);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
}

void Stmt::bind_at(int index, std::nullopt_t) {
  int rc = sqlite3_bind_null(stmt_, index);
  if (bind_rc_ == SQLITE_OK) bind_rc_ = rc;
}

Result<bool> Stmt::step() {
  if (bind_rc_ != SQLITE_OK) return std::unexpected(sqlite_error(db_, bind_rc_, step_ + " (bind)"));
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return std::unexpected(sqlite_error(db_, rc, step_));
}

Result<void> Stmt::run() {
  for (;;) {
    auto row = step();
    if (!row) return std::unexpected(row.error());
    if (!*row) return {};
  }
}

// ---- Row ----

std::string Row::text() {
  const int column = column_++;
  const unsigned char* data = sqlite3_column_text(stmt_, column);
  if (data == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(data),
                     static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
}

int64_t Row::int64() {
  return sqlite3_column_int64(stmt_, column_++);
}

std::optional<int64_t> Row::optional_int64() {
  const int column = column_++;
  if (sqlite3_column_type(stmt_, column) == SQLITE_NULL) return std::nullopt;
  return sqlite3_column_int64(stmt_, column);
}

double Row::real() {
  return sqlite3_column_double(stmt_, column_++);
}

// ---- Db ----

Result<Db> Db::open(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Db db(raw);  // sqlite3_open_v2 hands back a handle to close even when it fails
  if (rc != SQLITE_OK) return std::unexpected(sqlite_error(raw, rc, "open database " + path));
  sqlite3_extended_result_codes(raw, 1);
  return db;
}

Db::Db(Db&& other) noexcept : db_(std::exchange(other.db_, nullptr)), cache_(std::move(other.cache_)) {}

Db::~Db() {
  if (cache_)
    for (auto& [sql, cached] : *cache_) sqlite3_finalize(cached.stmt);
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

Result<Stmt> Db::prepare(std::string_view sql, std::string step) {
  CachedStmt* slot = nullptr;
  if (auto it = cache_->find(std::string(sql)); it != cache_->end()) {
    // In use: the same text open twice at once (a nested query) gets its own copy.
    if (!it->second.in_use) {
      it->second.in_use = true;
      return Stmt(db_, it->second.stmt, std::move(step), &it->second);
    }
  } else if (cache_->size() < kCachedStatements) {
    slot = &(*cache_)[std::string(sql)];
  }
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                              slot != nullptr ? SQLITE_PREPARE_PERSISTENT : 0, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    if (slot != nullptr) cache_->erase(std::string(sql));
    return std::unexpected(sqlite_error(db_, rc, step + " (prepare)"));
  }
  if (slot == nullptr) return Stmt(db_, stmt, std::move(step));
  slot->stmt = stmt;
  slot->in_use = true;
  return Stmt(db_, stmt, std::move(step), slot);
}

Result<void> Db::exec(std::string_view sql, std::string_view step) {
  std::string text(sql);  // sqlite3_exec wants a NUL-terminated string
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return std::unexpected(sqlite_error(db_, rc, step));
  return {};
}

Result<int64_t> Db::query_int64(std::string_view sql, std::string step) {
  auto stmt = prepare(sql, std::move(step));
  if (!stmt) return std::unexpected(stmt.error());
  auto row = stmt->step();
  if (!row) return std::unexpected(row.error());
  return *row ? Row(*stmt).int64() : 0;
}

// ---- Transaction ----

Result<Transaction> Transaction::begin(Db& db, std::string_view step) {
  if (auto r = db.exec("BEGIN IMMEDIATE", std::string(step) + ": begin"); !r) {
    return std::unexpected(r.error());
  }
  return Transaction(db, step);
}

Transaction::Transaction(Transaction&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), step_(std::move(other.step_)) {}

Transaction::~Transaction() {
  // Nothing better to do if ROLLBACK itself fails: the error that got us here is
  // already on its way to the caller.
  if (db_ != nullptr) sqlite3_exec(db_->get(), "ROLLBACK", nullptr, nullptr, nullptr);
}

Result<void> Transaction::commit() {
  Db* db = std::exchange(db_, nullptr);
  if (auto r = db->exec("COMMIT", step_ + ": commit"); !r) {
    sqlite3_exec(db->get(), "ROLLBACK", nullptr, nullptr, nullptr);
    return r;
  }
  return {};
}

}  // namespace cela::store
