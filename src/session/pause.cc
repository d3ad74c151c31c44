// Pause and resume: a session's processes frozen by its cgroup's freezer (v1
// freezer.state, v2 cgroup.freeze) and thawed again. Reactor-only.
//
// Clocks while a session is paused (docs/api.md "Pause and resume"):
//   - the TTL keeps running (a paused session still ends at expires_at);
//   - the idle clock (idle_timeout_s, auto_pause_s) stops, and starts again from the
//     resume: a resume counts as activity;
//   - exec timeouts and the wait for an exec to start stop, and go on with what was
//     left of them after the resume: a frozen exec's time does not run out.
#include <boost/json/object.hpp>
#include <cmath>
#include <cstdio>

#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace json = boost::json;
namespace {

void run_waiters(Session& s) {
  auto waiters = std::move(s.after_freeze);
  s.after_freeze.clear();
  for (auto& w : waiters) w();
}

// What is left of an armed timer, stopping it (its handler sees operation_aborted).
std::optional<Clock::duration> stop_timer(std::unique_ptr<boost::asio::steady_timer>& timer, bool armed) {
  if (!timer || !armed) return std::nullopt;
  auto left = timer->expiry() - Clock::now();
  timer->cancel();
  timer.reset();
  return std::max(left, Clock::duration::zero());
}

}  // namespace

void SessionManager::set_frozen(const std::shared_ptr<Session>& session, bool frozen, Done<void> done) {
  assert_on_reactor();
  using Freeze = Session::Freeze;
  Session& s = *session;
  if (s.ended || !s.instance) return done(fail(ErrorCode::gone, "session " + s.record.id + " has ended"));
  if (s.freeze == Freeze::pausing || s.freeze == Freeze::resuming || s.snapshotting) {
    // One change at a time: this one is decided again once that one has settled (a
    // snapshot holds the freezer until its copy is done: snapshot.cc).
    s.after_freeze.push_back([this, session, frozen, done] { set_frozen(session, frozen, done); });
    return;
  }
  if ((s.freeze == Freeze::paused) == frozen) return done({});
  s.freeze = frozen ? Freeze::pausing : Freeze::resuming;
  if (frozen) {
    for (auto& [id, e] : s.execs) {
      if (e->finished) continue;
      e->start_left = stop_timer(e->start_timer, !e->started);
      e->timeout_left = stop_timer(e->timeout, e->started && !e->observed.wait_status);
    }
  }
  auto began = Clock::now();
  s.instance->freeze(frozen, [this, session, frozen, began, done](Result<void> r) {
    Session& s = *session;
    auto ms = std::chrono::duration<double, std::milli>(Clock::now() - began).count();
    if (s.ended) {
      done(fail(ErrorCode::gone, "session " + s.record.id + " has ended"));
      return run_waiters(s);
    }
    // A freeze that failed was thawed again by the runtime: the session runs.
    bool paused = frozen && r;
    if (!frozen && !r) paused = s.instance->frozen();
    s.freeze = paused ? Session::Freeze::paused : Session::Freeze::running;
    if (!paused) {
      s.last_activity = Clock::now();  // a resume counts as activity
      for (auto& [id, e] : s.execs) {
        if (e->finished) continue;
        if (auto left = std::exchange(e->start_left, std::nullopt)) arm_exec_start_timer(session, e, *left);
        if (auto left = std::exchange(e->timeout_left, std::nullopt)) arm_exec_timeout(*e, *left);
      }
    }
    s.record.state = std::string(paused ? store::session_state::paused : store::session_state::ready);
    if (auto w = store_.set_state(s.record.id, s.record.state); !w)
      std::fprintf(stderr, "cela: recording %s as %s failed: %s\n", s.record.id.c_str(), s.record.state.c_str(),
                   w.error().message().c_str());
    if (!r)
      std::fprintf(stderr, "cela: %s %s failed after %.1f ms: %s\n", frozen ? "pausing" : "resuming",
                   s.record.id.c_str(), ms, r.error().message().c_str());
    arm_session_timer(session);
    json::object data{{"result", r ? "ok" : "failed"}, {"ms", std::round(ms * 10) / 10}};
    if (!r) data["message"] = r.error().message();
    observe_change(s, frozen ? "session.pause" : "session.resume", std::move(data));
    done(r);
    run_waiters(s);
  });
}

bool SessionManager::running_or_later(Session& s, std::function<void(Result<void>)> retry) {
  assert_on_reactor();
  using Freeze = Session::Freeze;
  if (s.freeze == Freeze::running || s.ended) return true;  // an ended one answers gone on its own
  auto it = sessions_.find(s.record.id);
  if (it == sessions_.end()) return true;
  std::shared_ptr<Session> session = it->second;
  if (s.freeze == Freeze::paused && !s.auto_resume) {
    retry(fail(ErrorCode::conflict, "session " + s.record.id + " is paused: resume it first (POST /v1/sessions/" +
                                        s.record.id + "/resume), or create it with auto_resume"));
    return false;
  }
  if (s.freeze == Freeze::pausing && !s.auto_resume) {
    // Decided once the freeze has settled (it may also fail and leave the session running).
    s.after_freeze.push_back([this, session, retry] {
      if (running_or_later(*session, retry)) retry({});
    });
    return false;
  }
  // Paused or pausing with auto_resume, or resuming: run again once it runs.
  set_frozen(session, false, [retry](Result<void> r) { retry(r); });
  return false;
}

void SessionManager::pause(const Caller& caller, const std::string& id, Done<store::SessionRecord> done) {
  pause_or_resume(caller, id, true, std::move(done));
}

void SessionManager::resume(const Caller& caller, const std::string& id, Done<store::SessionRecord> done) {
  pause_or_resume(caller, id, false, std::move(done));
}

void SessionManager::pause_or_resume(const Caller& caller, const std::string& id, bool frozen,
                                     Done<store::SessionRecord> done) {
  on_reactor([this, caller, id, frozen, done = std::move(done)] {
    auto found = find_live(caller, id);
    if (!found) return done(std::unexpected(found.error()));
    std::shared_ptr<Session> session = *found;
    set_frozen(session, frozen, [session, done](Result<void> r) {
      if (!r) return done(std::unexpected(r.error()));
      done(session->record);
    });
  });
}

}  // namespace cela::session
