#include "obs/audit.h"

#include <fcntl.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <boost/json.hpp>

#include "common/json_text.h"
#include "common/sha256.h"
#include "common/time.h"
#include "obs/catalog.h"
#include "obs/log.h"

namespace cela::obs {
namespace json = boost::json;

namespace {
std::atomic<AuditLog*> g_audit{nullptr};

void field(Sha256& h, std::string_view v) {
  h.update(std::to_string(v.size()));
  h.update(":");
  h.update(v);
}
}  // namespace

json::object AuditRecord::to_json() const {
  json::object o;
  o["seq"] = seq;
  o["at"] = at;
  o["tenant_id"] = tenant_id;
  o["session_id"] = session_id.empty() ? json::value(nullptr) : json::value(session_id);
  o["exec_id"] = exec_id.empty() ? json::value(nullptr) : json::value(exec_id);
  o["kind"] = kind;
  boost::system::error_code ec;
  json::value d = json::parse(data, ec);
  o["data"] = ec || !d.is_object() ? json::value(json::object{}) : d;
  o["prev_hash"] = prev_hash;
  o["hash"] = hash;
  return o;
}

std::string chain_hash(const AuditRecord& r) {
  Sha256 h;
  field(h, "cela-audit-v1");
  field(h, r.prev_hash);
  field(h, std::to_string(r.seq));
  field(h, std::to_string(r.at_ms));
  field(h, r.at);
  field(h, r.tenant_id);
  field(h, r.session_id);
  field(h, r.exec_id);
  field(h, r.kind);
  field(h, r.data);
  return h.hex_final();
}

void ChainVerifier::feed(const AuditRecord& r) {
  ++checked_;
  auto where = "record " + std::to_string(r.seq) + " (" + r.kind + ", " + r.at + ")";
  if (r.seq != prev_seq_ + 1) {
    if (r.seq <= prev_seq_)
      problems_.push_back(where + ": out of order (after record " + std::to_string(prev_seq_) + ")");
    else
      problems_.push_back(where + ": records " + std::to_string(prev_seq_ + 1) + ".." + std::to_string(r.seq - 1) +
                          " are missing");
  }
  if (r.prev_hash != prev_hash_)
    problems_.push_back(where + ": prev_hash does not match the hash of the record before it (removed or reordered)");
  if (chain_hash(r) != r.hash) problems_.push_back(where + ": its content does not match its hash (edited)");
  prev_seq_ = r.seq;
  prev_hash_ = r.hash;
}

Result<std::unique_ptr<AuditLog>> AuditLog::open(AuditBackend& backend, AuditOptions options) {
  std::unique_ptr<AuditLog> log(new AuditLog(backend, std::move(options)));
  auto head = backend.head();
  if (!head) return std::unexpected(head.error());
  log->seq_ = head->seq;
  log->head_hash_ = head->hash;
  if (!log->options_.file.empty()) {
    log->file_fd_ = ::open(log->options_.file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (log->file_fd_ < 0) return sys_fail("open the audit export file " + log->options_.file);
  }
  if (log->options_.syslog) ::openlog("cela-audit", LOG_PID | LOG_NDELAY, LOG_AUTHPRIV);
  return log;
}

AuditLog::~AuditLog() {
  if (file_fd_ >= 0) ::close(file_fd_);
  if (options_.syslog) ::closelog();
}

Result<AuditRecord> AuditLog::record(std::string_view kind, const Subject& subject, const json::object& data) {
  AuditRecord r;
  r.tenant_id = subject.tenant_id;
  r.session_id = subject.session_id;
  r.exec_id = subject.exec_id;
  r.kind = kind;
  r.data = json_text(data);
  std::lock_guard lock(mu_);
  r.seq = seq_ + 1;
  r.at_ms = now_ms();
  r.at = format_rfc3339(r.at_ms);
  r.prev_hash = head_hash_;
  r.hash = chain_hash(r);
  if (auto w = backend_.append(r); !w) {
    catalog::audit_failures().add({});
    error("audit record not written", {{"kind", r.kind}, {"session_id", r.session_id}, {"error", w.error().message()}});
    return std::unexpected(w.error());
  }
  seq_ = r.seq;
  head_hash_ = r.hash;
  catalog::audit_records().add({r.kind});
  if (file_fd_ >= 0 || options_.syslog) {
    std::string line = json_text(r.to_json());
    if (options_.syslog) ::syslog(LOG_INFO, "%s", line.c_str());
    line += '\n';
    // Best effort: the store holds the record; a full export disk must not stop the daemon.
    if (file_fd_ >= 0 && ::write(file_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      catalog::audit_failures().add({});
  }
  for (auto& [token, sub] : subscribers_)
    if (sub.first.empty() || sub.first == r.session_id) sub.second(r);
  return r;
}

uint64_t AuditLog::subscribe(std::string session_id, Subscriber fn) {
  std::lock_guard lock(mu_);
  uint64_t token = next_token_++;
  subscribers_[token] = {std::move(session_id), std::move(fn)};
  return token;
}

void AuditLog::unsubscribe(uint64_t token) {
  std::lock_guard lock(mu_);
  subscribers_.erase(token);
}

std::string body_hash(std::string_view text) { return "sha256:" + sha256_hex(text); }

std::string AuditLog::body(std::string_view text) const {
  if (options_.exec_bodies == BodyPolicy::keep || text.size() <= options_.body_keep_bytes) return std::string(text);
  return body_hash(text);
}

void install_audit(AuditLog* log) { g_audit = log; }
AuditLog* installed_audit() { return g_audit.load(); }

void audit(std::string_view kind, const Subject& subject, const json::object& data) {
  if (AuditLog* log = g_audit.load(); log && log->options().enabled) (void)log->record(kind, subject, data);
}

}  // namespace cela::obs
