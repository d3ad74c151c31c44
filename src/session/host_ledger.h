// The host-wide ledger of what cela processes hold of the host's shared tables
// (memory, pids, open files; see admission.h). One host may run several daemons (each
// with its own state dir), one-shot `cela run` jails and template builds; each keeps
// its own grants, so without a common ledger together they overfill the host.
//
// A directory (admission.ledger_dir, default /run/cela/grants) holds one file per
// holder process, named `<pid>-<start>` (start: field 22 of /proc/PID/stat, so a
// recycled pid is not taken for its old holder), holding what that process holds now
// and the limit it admits against. A file is only replaced whole (a temp file renamed
// over it). Every admit decision runs under an flock on `<dir>/.lock`, so two processes
// cannot both slip through. The lock file also carries the totals of all holders, which
// each holder changes in the same turn of the lock as its own file: an admit reads
// those (one pread) and scans the directory only when its last scan is older than
// `cache` or before it refuses, to drop what holders that died left in the totals.
// Files of dead holders (pid gone, or alive with another start time) are ignored and
// removed; no other file in the directory is ever touched.
//
// The limit is the strictest one any live holder declares: a `cela run` that measured
// the whole host still keeps within the smaller capacity a daemon was configured with.
//
// Thread-safe: a daemon's reactor (sessions) and its build thread (build step jails)
// take and give back through the one ledger of the process; a mutex orders them here,
// the flock across processes. Holders must share a pid namespace (pids name them).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "common/error.h"
#include "common/fd.h"
#include "session/types.h"

namespace cela::session {

// What one session (or `cela run`, or build step) may take of the host's shared
// tables: its memory limit, its pids limit (every sandbox process holds a host pid)
// and its open files (the RLIMIT_NOFILE of its processes times their number: what the
// kernel lets it hold against fs.file-max).
struct HostGrant {
  uint64_t memory_mb = 0, pids = 0, files = 0;
  static HostGrant of(const SessionLimits& limits, uint64_t nofile);
  static HostGrant of(uint64_t memory_mb, uint64_t pids, uint64_t nofile) { return {memory_mb, pids, nofile * pids}; }
  bool operator==(const HostGrant&) const = default;
};

// capacity_exceeded naming the first table `asked` would overfill, or ok. `here` is
// what this process holds, `elsewhere` what other cela processes hold (the message
// says so, naming `ledger_dir`, when they hold part of that table).
Result<void> check_host_tables(const HostGrant& here, const HostGrant& elsewhere, const HostGrant& asked,
                               const HostGrant& limit, const std::string& ledger_dir = "");

class HostLedger {
 public:
  // A process as the ledger names it.
  struct Holder {
    pid_t pid = 0;
    uint64_t start = 0;  // /proc/PID/stat field 22 (clock ticks since boot)
    bool operator==(const Holder&) const = default;
  };
  // The live process `pid` (0: this one; a zombie counts as gone), or not_found.
  static Result<Holder> holder_of(pid_t pid, const std::string& proc = "/proc");

  // Opens `dir` (made 0755 if missing) for this process. `cache`: how long
  // the lock file's totals are trusted before the directory is scanned again.
  static Result<std::unique_ptr<HostLedger>> open(const std::string& dir,
                                                  std::chrono::milliseconds cache = std::chrono::milliseconds(250));
  ~HostLedger();  // removes this process's file
  HostLedger(const HostLedger&) = delete;
  HostLedger& operator=(const HostLedger&) = delete;

  // Adds `grant` to what this process holds if, in every table, what it holds plus what
  // live others hold plus `grant` stays within the strictest of `limit` and the limits
  // of live others; else capacity_exceeded naming the table (nothing taken then).
  Result<void> take(const HostGrant& grant, const HostGrant& limit);
  // Returns what take() added.
  void give_back(const HostGrant& grant);
  // Publishes the limit this process admits against before it holds anything (a
  // daemon at start), so one-shot runs keep within it too.
  Result<void> declare(const HostGrant& limit);

  // Would take() admit `grant` now? (Nothing is taken: a later take() may still refuse.)
  Result<void> check(const HostGrant& grant, const HostGrant& limit);

  HostGrant mine() const;
  // What live others hold, read now (not the cached copy).
  Result<HostGrant> others();
  const std::string& dir() const { return dir_; }

 private:
  HostLedger() = default;
  // The lock file's header: what all holders hold (each holder adds its changes in
  // the same turn of the lock as its file) and the strictest limit they declare.
  struct Header {
    HostGrant held, limit;
  };
  // The caller holds mu_ and the flock.
  std::optional<Header> read_header() const;
  void write_header(const Header& h);
  Result<void> refresh(bool force);
  Result<void> publish();

  std::string dir_, name_, tmp_name_;
  Holder self_;
  std::chrono::milliseconds cache_{250};
  UniqueFd dir_fd_, lock_fd_;

  mutable std::mutex mu_;
  HostGrant mine_, limit_{UINT64_MAX, UINT64_MAX, UINT64_MAX};
  // What our file (and our share of the header) says.
  HostGrant published_;
  std::optional<HostGrant> published_limit_;
  // The others as last worked out (header minus our share, or a scan), and when the
  // directory was last scanned.
  HostGrant others_, others_limit_{UINT64_MAX, UINT64_MAX, UINT64_MAX};
  std::chrono::steady_clock::time_point scanned_at_{};
};

// A grant taken from a ledger, given back when this is dropped (`cela run`, build steps).
class HeldGrant {
 public:
  HeldGrant() = default;
  static Result<HeldGrant> take(HostLedger& ledger, const HostGrant& grant, const HostGrant& limit) {
    if (auto r = ledger.take(grant, limit); !r) return std::unexpected(r.error());
    HeldGrant h;
    h.ledger_ = &ledger;
    h.grant_ = grant;
    return h;
  }
  HeldGrant(HeldGrant&& o) noexcept : ledger_(std::exchange(o.ledger_, nullptr)), grant_(o.grant_) {}
  HeldGrant& operator=(HeldGrant&& o) noexcept {
    if (this != &o) {
      reset();
      ledger_ = std::exchange(o.ledger_, nullptr);
      grant_ = o.grant_;
    }
    return *this;
  }
  ~HeldGrant() { reset(); }
  void reset() {
    if (ledger_) std::exchange(ledger_, nullptr)->give_back(grant_);
  }

 private:
  HostLedger* ledger_ = nullptr;
  HostGrant grant_;
};

}  // namespace cela::session
