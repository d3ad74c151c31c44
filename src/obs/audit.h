// The audit log: append-only, hash-chained records of what happened to and inside
// sessions, written by the daemon (outside every sandbox) into its state store.
//
// Chain: record n carries prev_hash = hash of record n-1 (the anchor for the first
// one) and hash = sha256 over its own fields and prev_hash (chain_hash(): each field
// length-prefixed, the data as the exact JSON text stored). Removing, editing or
// reordering a stored record breaks the chain at that point (ChainVerifier); the
// retention purge moves the anchor to the last record it deleted, so a purged prefix
// is not a break. What the chain cannot show alone: records cut from the end (see
// docs/security.md "Audit": export to a file or syslog keeps a copy out of the store).
//
// Threads: record() may be called from any thread. One mutex orders the whole append
// (sequence number, hash, store write, export sinks, live subscribers), so the stored
// order, the chain order and the order subscribers see are the same.
//
// Entry point for every module: obs::audit(kind, subject, data) writes through the
// daemon's installed AuditLog and does nothing when none is installed (unit tests,
// `cela run`). Kinds are dotted names: session.create, session.terminate,
// session.pause, session.resume, session.reset, session.snapshot, exec.start, exec.end,
// process.exec, files.written, limit.* (oom, pids, disk, cpu_throttle, timeout, ttl,
// egress_bandwidth, egress_connections), auth.failure, egress.connection,
// package.install, secret.granted, secret.expired, file.exported (docs/security.md
// lists them with their fields).
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cela::obs {

// The hash the first record of a chain points to.
inline constexpr std::string_view kGenesisHash = "0000000000000000000000000000000000000000000000000000000000000000";

struct AuditRecord {
  int64_t seq = 0;
  int64_t at_ms = 0;
  std::string at;  // RFC 3339 of at_ms
  std::string tenant_id, session_id, exec_id;  // "" when not about one
  std::string kind;
  std::string data;  // a JSON object, as stored and hashed
  std::string prev_hash, hash;

  // {seq, at, tenant_id, session_id, exec_id, kind, data: {...}, prev_hash, hash}
  boost::json::object to_json() const;
};

// sha256 hex over prev_hash and every field of `r` but `hash`.
std::string chain_hash(const AuditRecord& r);

// Where the chain starts: after the record `seq` whose hash is `hash` (nothing purged
// yet: seq 0, the genesis hash).
struct ChainAnchor {
  int64_t seq = 0;
  std::string hash = std::string(kGenesisHash);
};

// Checks records fed in stored order (by seq). Every problem is described once with
// the seq where the chain broke.
class ChainVerifier {
 public:
  explicit ChainVerifier(ChainAnchor anchor) : prev_seq_(anchor.seq), prev_hash_(std::move(anchor.hash)) {}
  void feed(const AuditRecord& r);
  bool ok() const { return problems_.empty(); }
  int64_t checked() const { return checked_; }
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  int64_t prev_seq_;
  std::string prev_hash_;
  int64_t checked_ = 0;
  std::vector<std::string> problems_;
};

// Where records go (the state store, through session/audit_store).
class AuditBackend {
 public:
  virtual ~AuditBackend() = default;
  virtual Result<void> append(const AuditRecord& record) = 0;
  // The newest record, or the anchor's seq/hash when the store holds none.
  virtual Result<ChainAnchor> head() = 0;
};

// Exec bodies (a shell line, stdin text, long arguments) in exec and process records:
// kept as they are, or replaced by "sha256:<hex>" of the text.
enum class BodyPolicy { keep, hash };

struct AuditOptions {
  bool enabled = true;
  bool process_exec = true;      // capture every execve/execveat inside sandboxes
  bool files_written = true;     // files.written after each exec
  BodyPolicy exec_bodies = BodyPolicy::hash;
  size_t body_keep_bytes = 64;   // under `hash`, shorter arguments are kept as they are
  double retention_days = 30;    // 0 keeps records forever
  std::string file;              // JSON lines export sink ("" = none), mode 0600, appended
  bool syslog = false;           // also to syslog(3), facility LOG_AUTHPRIV, ident cela-audit
};

// Who a record is about.
struct Subject {
  std::string tenant_id, session_id, exec_id;
};

class AuditLog {
 public:
  // Reads the chain head from `backend`, opens the export file.
  static Result<std::unique_ptr<AuditLog>> open(AuditBackend& backend, AuditOptions options);
  ~AuditLog();

  // Appends one record. When the backend refuses it (state dir full) the chain does
  // not advance, the failure is counted and logged, and the error returned.
  Result<AuditRecord> record(std::string_view kind, const Subject& subject, const boost::json::object& data);

  // Live records of one session ("" = every session), in chain order, called under the
  // append lock: the callback must not block and must not record.
  using Subscriber = std::function<void(const AuditRecord&)>;
  uint64_t subscribe(std::string session_id, Subscriber fn);
  void unsubscribe(uint64_t token);

  const AuditOptions& options() const { return options_; }
  // `text` under the body policy: itself (keep, or short enough), else "sha256:<hex>".
  std::string body(std::string_view text) const;

 private:
  AuditLog(AuditBackend& backend, AuditOptions options) : backend_(backend), options_(std::move(options)) {}

  AuditBackend& backend_;
  const AuditOptions options_;
  std::mutex mu_;
  int64_t seq_ = 0;
  std::string head_hash_;
  int file_fd_ = -1;
  uint64_t next_token_ = 1;
  std::map<uint64_t, std::pair<std::string, Subscriber>> subscribers_;
};

// The daemon's audit log, for obs::audit(); nullptr uninstalls. Not owned.
void install_audit(AuditLog* log);
AuditLog* installed_audit();
// Records through the installed log (nothing without one). Failures are counted and
// logged by the log itself.
void audit(std::string_view kind, const Subject& subject, const boost::json::object& data);

// "sha256:<hex>" of `text`.
std::string body_hash(std::string_view text);

}  // namespace cela::obs
