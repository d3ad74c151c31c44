// Session timers: TTL and idle timeout (with no client connected), and the
// retention sweep of ended sessions' records and output. Reactor-only.
#include <boost/asio/post.hpp>
#include <algorithm>
#include <cstdio>
#include <unistd.h>

#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;

namespace {
// The idle clock runs while no exec runs and the session is not paused (nor pausing or
// resuming), from the end of the last exec, the last call or the resume.
bool idle_clock_runs(const Session& s) { return s.running_execs() == 0 && s.freeze == Session::Freeze::running; }
}  // namespace

// TTL, idle timeout or auto-pause, whichever comes first. The TTL runs always, paused
// or not; the idle clock as above (exec_finished and set_frozen re-arm this timer).
void SessionManager::arm_session_timer(const std::shared_ptr<Session>& session) {
  assert_on_reactor();
  if (!session->timer || session->ended) return;
  auto at = session->expires;
  if (idle_clock_runs(*session)) {
    for (uint64_t after : {session->limits.idle_timeout_s, session->auto_pause_s}) {
      if (!after) continue;
      auto idle_at = session->last_activity + std::chrono::seconds(after);
      if (idle_at < at) at = idle_at;
    }
  }
  session->timer->expires_at(at);
  std::weak_ptr<Session> weak = session;
  session->timer->async_wait([this, weak](boost::system::error_code ec) {
    if (ec) return;
    auto s = weak.lock();
    if (!s || s->ended) return;
    auto now = Clock::now();
    if (now >= s->expires && s->pause_at_ttl && !s->parked) return park(s);
    if (now >= s->expires)
      return terminate(s, "terminated", "ttl_expired", "the session's ttl of " + std::to_string(s->limits.ttl_s) + " s ran out");
    auto idle_for = [&](uint64_t seconds) {
      return seconds > 0 && idle_clock_runs(*s) && now >= s->last_activity + std::chrono::seconds(seconds);
    };
    if (idle_for(s->limits.idle_timeout_s))
      return terminate(s, "terminated", "idle_timeout",
                       "no activity for " + std::to_string(s->limits.idle_timeout_s) + " s");
    if (idle_for(s->auto_pause_s)) {
      // set_frozen re-arms this timer once the freezer has settled.
      return set_frozen(s, true, [id = s->record.id](Result<void> r) {
        if (!r) std::fprintf(stderr, "cela: auto-pause of %s: %s\n", id.c_str(), r.error().message().c_str());
      });
    }
    arm_session_timer(s);  // activity moved the deadline
  });
}

void SessionManager::park(const std::shared_ptr<Session>& session) {
  assert_on_reactor();
  Session& s = *session;
  s.parked = true;
  const auto lease = std::chrono::seconds(config_.maxima.ttl_s);
  SessionRecord next = s.record;
  next.expires_at = store::format_rfc3339(store::now_ms() + static_cast<int64_t>(config_.maxima.ttl_s) * 1000);
  if (auto u = store_.update_session(next); !u)
    std::fprintf(stderr, "cela: recording the paused lease of %s: %s\n", s.record.id.c_str(), u.error().message().c_str());
  else
    s.record.expires_at = next.expires_at;
  s.expires = Clock::now() + lease;
  set_frozen(session, true, [id = s.record.id](Result<void> r) {
    if (!r) std::fprintf(stderr, "cela: pause at the ttl of %s: %s\n", id.c_str(), r.error().message().c_str());
  });
  arm_session_timer(session);  // the new expiry (set_frozen re-arms again once settled)
}

void SessionManager::arm_retention() {
  assert_on_reactor();
  if (config_.output_retention_days <= 0 || stopping_) return;
  auto retention_ms = static_cast<int64_t>(config_.output_retention_days * 86'400'000.0);
  int64_t cutoff = store::now_ms() - retention_ms;
  auto paths = store_.purge_ended_before(store::format_rfc3339(cutoff));
  if (paths) {
    for (const auto& p : *paths) ::unlink(p.c_str());
  } else {
    std::fprintf(stderr, "cela: output retention: %s\n", paths.error().message().c_str());
  }
  if (!retention_timer_) retention_timer_ = std::make_unique<asio::steady_timer>(reactor_);
  // Swept hourly, or more often when the retention itself is short.
  auto every = std::clamp<int64_t>(retention_ms / 4, 500, 3'600'000);
  retention_timer_->expires_after(std::chrono::milliseconds(every));
  retention_timer_->async_wait([this](boost::system::error_code ec) {
    if (!ec) arm_retention();
  });
}

}  // namespace cela::session
