#include "session/admission.h"

#include <boost/asio/post.hpp>
#include <cstdio>

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
