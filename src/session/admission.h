// Admission: whether a new session may start now. Host capacity (live and starting
// sessions against DaemonConfig::max_sessions, with a bounded, asynchronous wait),
// the host's shared tables (the sum of the memory, pids and open files granted to live
// sessions against what the host has times an overcommit ratio) and tenant quotas
// (live sessions, total memory, cpus per session).
//
// The limit of the tables also holds what a host-wide ledger says other cela processes
// hold (host_ledger.h), when the daemon has one.
//
// Reactor-only. Quotas are checked against the store's live sessions; the check and
// the insert that follows run in one reactor turn, so two creates cannot both slip
// through.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <optional>
#include <string>

#include "common/error.h"
#include "session/config.h"
#include "session/host_ledger.h"
#include "session/types.h"
#include "store/records.h"
#include "store/store.h"

namespace cela::session {

// What the host has of each, before overcommit.
struct HostCapacity {
  uint64_t memory_mb = 0, pids = 0, files = 0;
  // MemTotal, min(kernel.pid_max, kernel.threads-max) and fs.file-max, read under
  // `proc`; a nonzero value in `config` replaces the measured one.
  static Result<HostCapacity> measure(const AdmissionConfig& config, const std::string& proc = "/proc");
};

// What the host's tables admit: what it has times the overcommit ratios.
HostGrant host_limit(const HostCapacity& capacity, const AdmissionConfig& overcommit);

// The ledger and limit of a process without a daemon (`cela run`, a local `cela template
// build`): the host measured, the default overcommit ratios (the strictest limit a live
// daemon declares in the ledger applies too).
struct LocalAdmission {
  std::unique_ptr<HostLedger> ledger;
  HostGrant limit;
  static Result<LocalAdmission> open(const std::string& ledger_dir);
};

class Admission {
 public:
  Admission(boost::asio::io_context& reactor, int64_t max_sessions) : reactor_(reactor), max_(max_sessions) {}
  ~Admission();

  // Reserves a host slot now, or once one frees within `wait`; else (or once
  // closed) capacity_exceeded. `done` runs on the reactor, never inside reserve().
  void reserve(std::chrono::seconds wait, std::function<void(Result<void>)> done);
  // Gives a reserved slot back; the oldest waiter gets it.
  void release();
  // Refuses waiters and every later reserve() with `why`.
  void close(const Error& why);
  bool full() const { return reserved_ >= max_; }
  int64_t reserved() const { return reserved_; }

  // The host's shared tables: until set, grants are not checked. With `ledger` (which
  // outlives this), grants are also recorded there and admitted against what other
  // cela processes on the host hold (host_ledger.h).
  void set_host(const HostCapacity& capacity, const AdmissionConfig& overcommit, HostLedger* ledger = nullptr);
  // capacity × overcommit, once set_host ran.
  const std::optional<HostGrant>& limit() const { return limit_; }
  // Adds `grant` to what live sessions hold, or capacity_exceeded naming the table it
  // would overfill (nothing taken then).
  Result<void> take(const HostGrant& grant);
  // Returns what take() added.
  void give_back(const HostGrant& grant);
  const HostGrant& granted() const { return granted_; }

  // The tenant's quotas for one more session of `limits`: quota_exceeded naming the
  // quota, or ok.
  static Result<void> check_quota(store::Store& store, const store::TenantRecord& tenant, const SessionLimits& limits);

 private:
  struct Waiter {
    std::function<void(Result<void>)> done;
    std::unique_ptr<boost::asio::steady_timer> timer;
  };
  Error capacity_error() const;

  boost::asio::io_context& reactor_;
  int64_t max_;
  int64_t reserved_ = 0;
  std::optional<HostGrant> limit_;  // capacity × overcommit
  HostLedger* ledger_ = nullptr;
  HostGrant granted_;
  std::list<Waiter> waiters_;
  std::optional<Error> closed_;
};

}  // namespace cela::session
