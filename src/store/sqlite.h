// Thin RAII over the SQLite C API, internal to src/store: one connection (Db), its
// prepared statements (Stmt), a sequential column reader (Row) and a write
// transaction (Transaction). Every failure becomes an Error whose context names the
// SQL step: "insert session: UNIQUE constraint failed: sessions.id".
//
// Nothing here locks: Store serialises all use of a connection with its own mutex.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/error.h"

namespace cela::store {

// Maps a SQLite result code to an Error: UNIQUE/PRIMARY KEY violations are conflict,
// other constraint failures invalid_argument, busy/locked and I/O failures are system (with the OS
// errno when SQLite has one), everything else internal.
Error sqlite_error(sqlite3* db, int rc, std::string_view step);

// Marks a text parameter that is stored as NULL when empty (optional timestamps,
// reasons): Row::text() reads NULL back as "".
struct NullIfEmpty {
  std::string_view text;
};

// A statement Db keeps prepared between uses (Db::prepare); `in_use` while a Stmt holds it.
struct CachedStmt {
  sqlite3_stmt* stmt = nullptr;
  bool in_use = false;
};

// One prepared statement; finalized on destruction, or reset and handed back to its
// connection's cache when it came from there. Bind errors are kept and reported by the
// next step()/run(), so call sites bind without checking.
class Stmt {
 public:
  Stmt(sqlite3* db, sqlite3_stmt* stmt, std::string step, CachedStmt* cached = nullptr)
      : db_(db), stmt_(stmt), step_(std::move(step)), cached_(cached) {}
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt(Stmt&& other) noexcept;
  Stmt& operator=(Stmt&&) = delete;
  ~Stmt();

  // Binds parameters 1..N in order: st.bind(id, tenant_id, 42).
  template <class... Args>
  Stmt& bind(const Args&... args) {
    int index = 0;
    (bind_at(++index, args), ...);
    return *this;
  }
  void bind_at(int index, std::string_view value);
  void bind_at(int index, const std::string& value) { bind_at(index, std::string_view(value)); }
  void bind_at(int index, const char* value) { bind_at(index, std::string_view(value)); }
  void bind_at(int index, NullIfEmpty value);
  void bind_at(int index, int64_t value);
  void bind_at(int index, int value) { bind_at(index, static_cast<int64_t>(value)); }
  void bind_at(int index, bool value) { bind_at(index, static_cast<int64_t>(value ? 1 : 0)); }
  void bind_at(int index, double value);
  void bind_at(int index, std::nullopt_t);
  template <class T>
  void bind_at(int index, const std::optional<T>& value) {
    if (value) {
      bind_at(index, *value);
    } else {
      bind_at(index, std::nullopt);
    }
  }

  // Advances one row: true when a row is ready to read, false when done.
  Result<bool> step();
  // Runs a statement that returns no rows (or whose rows are not wanted).
  Result<void> run();
  // Rows changed by the last run() on this connection.
  int64_t changes() const { return sqlite3_changes64(db_); }

  sqlite3_stmt* get() const { return stmt_; }
  const std::string& step_name() const { return step_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  std::string step_;
  CachedStmt* cached_;
  int bind_rc_ = SQLITE_OK;
};

// Reads the current row's columns left to right: Row r(st); id = r.text(); n = r.int64();
class Row {
 public:
  explicit Row(const Stmt& stmt) : stmt_(stmt.get()) {}
  std::string text();  // NULL reads as ""
  int64_t int64();     // NULL reads as 0
  std::optional<int64_t> optional_int64();
  double real();
  bool boolean() { return int64() != 0; }

 private:
  sqlite3_stmt* stmt_;
  int column_ = 0;
};

// One connection; closed on destruction.
class Db {
 public:
  static Result<Db> open(const std::string& path, int flags);
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  Db(Db&& other) noexcept;
  Db& operator=(Db&&) = delete;
  ~Db();

  // `step` names the operation in errors ("insert session"). The statement is compiled
  // once per distinct SQL text (up to kCachedStatements of them) and reused: parsing
  // costs more than running most of the store's statements.
  Result<Stmt> prepare(std::string_view sql, std::string step);
  static constexpr size_t kCachedStatements = 256;
  // Runs one or more statements that return no rows.
  Result<void> exec(std::string_view sql, std::string_view step);
  // The first column of the first row (0 when there is none). The statement is
  // finished before returning: an unfinished read would block COMMIT.
  Result<int64_t> query_int64(std::string_view sql, std::string step);

  sqlite3* get() const { return db_; }

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_ = nullptr;
  // By SQL text. Node-based: a Stmt's pointer to its entry survives rehashing.
  std::unique_ptr<std::unordered_map<std::string, CachedStmt>> cache_ =
      std::make_unique<std::unordered_map<std::string, CachedStmt>>();
};

// BEGIN IMMEDIATE .. COMMIT. IMMEDIATE takes the write lock up front, so a
// read-then-write transaction waits in the busy handler instead of failing with
// SQLITE_BUSY when it later upgrades. Rolls back on destruction unless committed.
class Transaction {
 public:
  static Result<Transaction> begin(Db& db, std::string_view step);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  Transaction(Transaction&& other) noexcept;
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();

  Result<void> commit();

 private:
  Transaction(Db& db, std::string_view step) : db_(&db), step_(step) {}
  Db* db_;
  std::string step_;
};

}  // namespace cela::store
