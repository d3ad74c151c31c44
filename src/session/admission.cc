#include "session/admission.h"

#include <boost/asio/post.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/fs.h"

namespace cela::session {
namespace asio = boost::asio;

Admission::~Admission() { close(Error{ErrorCode::capacity_exceeded, 0, "the daemon is stopping"}); }

Error Admission::capacity_error() const {
  return Error{ErrorCode::capacity_exceeded, 0, "host is at its limit of " + std::to_string(max_) + " sessions"};
}

void Admission::reserve(std::chrono::seconds wait, std::function<void(Result<void>)> done) {
  if (closed_) {
    asio::post(reactor_, [done = std::move(done), e = *closed_] { done(std::unexpected(e)); });
    return;
  }
  if (reserved_ < max_ && waiters_.empty()) {
    ++reserved_;
    asio::post(reactor_, [done = std::move(done)] { done({}); });
    return;
  }
  if (wait.count() <= 0) {
    asio::post(reactor_, [done = std::move(done), e = capacity_error()] { done(std::unexpected(e)); });
    return;
  }
  waiters_.push_back({std::move(done), std::make_unique<asio::steady_timer>(reactor_, wait)});
  auto it = std::prev(waiters_.end());
  it->timer->async_wait([this, it](boost::system::error_code ec) {
    if (ec) return;  // served or closed: the waiter is gone
    auto done = std::move(it->done);
    waiters_.erase(it);
    done(std::unexpected(capacity_error()));
  });
}

void Admission::release() {
  if (reserved_ > 0) --reserved_;
  while (reserved_ < max_ && !waiters_.empty()) {
    ++reserved_;
    auto done = std::move(waiters_.front().done);
    waiters_.front().timer->cancel();
    waiters_.pop_front();
    asio::post(reactor_, [done = std::move(done)] { done({}); });
  }
}

void Admission::close(const Error& why) {
  closed_ = why;
  auto waiters = std::move(waiters_);
  waiters_.clear();
  for (auto& w : waiters) {
    w.timer->cancel();
    asio::post(reactor_, [done = std::move(w.done), why] { done(std::unexpected(why)); });
  }
}

Result<HostCapacity> HostCapacity::measure(const AdmissionConfig& config, const std::string& proc) {
  HostCapacity c{config.host_memory_mb, config.host_pids, config.host_files};
  if (!c.memory_mb) {
    auto meminfo = read_file(proc + "/meminfo");
    if (!meminfo) return std::unexpected(meminfo.error());
    std::istringstream lines(*meminfo);
    std::string key;
    uint64_t kib = 0;
    while (lines >> key >> kib && key != "MemTotal:") lines.ignore(1 << 10, '\n');
    if (key != "MemTotal:" || !kib) return fail(ErrorCode::system, "no MemTotal in " + proc + "/meminfo");
    c.memory_mb = kib / 1024;
  }
  if (!c.pids) {
    auto pid_max = read_u64(proc + "/sys/kernel/pid_max");
    if (!pid_max) return std::unexpected(pid_max.error());
    auto threads = read_u64(proc + "/sys/kernel/threads-max");
    if (!threads) return std::unexpected(threads.error());
    c.pids = std::min(*pid_max, *threads);
  }
  if (!c.files) {
    auto files = read_u64(proc + "/sys/fs/file-max");
    if (!files) return std::unexpected(files.error());
    c.files = *files;
  }
  return c;
}

HostGrant host_limit(const HostCapacity& capacity, const AdmissionConfig& overcommit) {
  auto times = [](uint64_t have, double ratio) {
    double v = std::floor(static_cast<double>(have) * ratio);
    return v >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(v);
  };
  return HostGrant{times(capacity.memory_mb, overcommit.memory_overcommit),
                   times(capacity.pids, overcommit.pids_overcommit),
                   times(capacity.files, overcommit.files_overcommit)};
}

Result<LocalAdmission> LocalAdmission::open(const std::string& ledger_dir) {
  AdmissionConfig defaults;
  auto capacity = HostCapacity::measure(defaults);
  if (!capacity) return std::unexpected(capacity.error());
  auto ledger = HostLedger::open(ledger_dir);
  if (!ledger) return std::unexpected(ledger.error());
  return LocalAdmission{std::move(*ledger), host_limit(*capacity, defaults)};
}

void Admission::set_host(const HostCapacity& capacity, const AdmissionConfig& overcommit, HostLedger* ledger) {
  limit_ = host_limit(capacity, overcommit);
  ledger_ = ledger;
}

Result<void> Admission::take(const HostGrant& grant) {
  if (limit_ && ledger_) {
    if (auto r = ledger_->take(grant, *limit_); !r) return r;
  } else if (limit_) {
    if (auto r = check_host_tables(granted_, {}, grant, *limit_); !r) return r;
  }
  granted_.memory_mb += grant.memory_mb;
  granted_.pids += grant.pids;
  granted_.files += grant.files;
  return {};
}

void Admission::give_back(const HostGrant& grant) {
  if (limit_ && ledger_) ledger_->give_back(grant);
  granted_.memory_mb -= std::min(granted_.memory_mb, grant.memory_mb);
  granted_.pids -= std::min(granted_.pids, grant.pids);
  granted_.files -= std::min(granted_.files, grant.files);
}

Result<void> Admission::check_quota(store::Store& store, const store::TenantRecord& tenant,
                                    const SessionLimits& limits) {
  const store::Quotas& q = tenant.quotas;
  auto cpus_text = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return std::string(buf);
  };
  if (q.max_cpus > 0 && limits.cpus > q.max_cpus)
    return fail(ErrorCode::quota_exceeded, "tenant quota allows at most " + cpus_text(q.max_cpus) + " cpus per session");
  if (q.max_sessions <= 0 && q.max_memory_mb <= 0) return {};
  auto usage = store.live_usage(tenant.id);
  if (!usage) return std::unexpected(usage.error());
  if (q.max_sessions > 0 && usage->sessions + 1 > q.max_sessions)
    return fail(ErrorCode::quota_exceeded,
                "tenant quota of " + std::to_string(q.max_sessions) + " live sessions reached");
  if (q.max_memory_mb > 0 && usage->memory_mb + static_cast<int64_t>(limits.memory_mb) > q.max_memory_mb)
    return fail(ErrorCode::quota_exceeded, "tenant quota of " + std::to_string(q.max_memory_mb) +
                                               " MiB of session memory reached (" + std::to_string(usage->memory_mb) +
                                               " MiB in use)");
  return {};
}

}  // namespace cela::session
