// Warm pools: sandboxes booted ahead, claimed by creates of the pool's shape.
// Reactor-only; boots run on the launcher threads like every other boot.
//
// A pooled sandbox holds what any live session holds: a host slot in Admission and its
// HostGrant (memory, pids, open files), so pools count against host capacity; a refill
// never jumps ahead of a create waiting for capacity (it reserves without waiting). It
// belongs to no tenant (its tenant's quota is checked at the claim), has no record in
// `sessions` and is not in the live map, so no call can reach it. It is recorded in
// `pooled_sessions` before it boots: recovery removes what a crash left. A claim turns
// it into the caller's session in one reactor turn and one store transaction; the pool
// then boots a replacement in the background.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <cstdio>

#include "common/nofile.h"
#include "obs/catalog.h"
#include "session/exec_env.h"
#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;
using store::SessionRecord;

namespace {
constexpr auto kPoolRetry = std::chrono::seconds(2);

void add_sample(std::deque<double>& samples, double ms) {
  samples.push_back(ms);
  if (samples.size() > WarmPool::kSamples) samples.pop_front();
}

std::optional<double> median(const std::deque<double>& samples) {
  if (samples.empty()) return std::nullopt;
  std::vector<double> v(samples.begin(), samples.end());
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

SessionLimits pool_limits(const PoolConfig& c) {
  SessionLimits l;
  l.cpus = c.cpus;
  l.memory_mb = c.memory_mb;
  l.disk_mb = c.disk_mb;
  l.pids = c.pids;
  return l;
}
}  // namespace

bool WarmPool::matches(const CreateSessionSpec& spec) const {
  // The shape is what the sandbox was booted with; everything else of a create (env,
  // metadata, TTL and timeouts, sudo, auto_pause, file policy) is the session's, set at
  // the claim. Secret grants are written into the sandbox as it starts: a create with
  // any boots cold.
  const SessionLimits& l = spec.limits;
  return spec.template_name == config.template_name && l.cpus == config.cpus && l.memory_mb == config.memory_mb &&
         l.disk_mb == config.disk_mb && l.pids == config.pids && spec.secrets.empty();
}

PoolStatus WarmPool::status() const {
  PoolStatus s;
  s.config = config;
  s.ready = ready.size();
  s.booting = booting;
  s.hits = hits;
  s.misses = misses;
  if (!refill_ms.empty()) s.refill_ms_last = refill_ms.back();
  s.refill_ms_p50 = median(refill_ms);
  s.claim_ms_p50 = median(claim_ms);
  s.last_error = last_error;
  return s;
}

void SessionManager::start_pools() {
  on_reactor([this] { fill_pools(); });
}

void SessionManager::pool_status(Done<std::vector<PoolStatus>> done) {
  on_reactor([this, done = std::move(done)] {
    std::vector<PoolStatus> out;
    for (const auto& p : pools_) out.push_back(p->status());
    done(std::move(out));
  });
}

void SessionManager::fill_pools() {
  assert_on_reactor();
  if (stopping_) return;
  for (auto& pool : pools_) {
    if (pool->retry) continue;  // waiting out a failure
    while (pool->ready.size() + pool->booting < pool->config.size) {
      uint64_t before = pool->booting;
      boot_pooled(*pool);
      if (pool->booting == before) break;  // refused (capacity): retry armed
    }
  }
}

void SessionManager::retry_pool_later(WarmPool& pool, const Error& why) {
  assert_on_reactor();
  pool.last_error = why.message();
  if (stopping_ || pool.retry) return;
  pool.retry = std::make_unique<asio::steady_timer>(reactor_, kPoolRetry);
  pool.retry->async_wait([this, &pool](boost::system::error_code ec) {
    if (ec) return;
    pool.retry.reset();
    fill_pools();
  });
}

void SessionManager::boot_pooled(WarmPool& pool) {
  assert_on_reactor();
  // A pooled sandbox takes a host slot only when one is free now and no create waits
  // for one: Admission::reserve answers at once with wait 0 (on a later turn).
  auto tmpl = rootfs::load_template(templates_, pool.config.template_name);
  if (!tmpl) return retry_pool_later(pool, tmpl.error());
  // A template's start command runs with the session it serves (booted()), which a
  // pooled sandbox does not have yet: such templates start cold, and their pool says so.
  if (tmpl->start)
    return retry_pool_later(pool, Error{ErrorCode::invalid_argument, 0,
                                        "template " + tmpl->name + " has a start command: its sessions start cold"});
  if (admission_.full()) return retry_pool_later(pool, Error{ErrorCode::capacity_exceeded, 0, "the host is full"});
  ++pool.booting;
  admission_.reserve(std::chrono::seconds(0), [this, &pool, tmpl = *tmpl](Result<void> reserved) {
    full_ = admission_.full();
    auto not_booted = [&](const Error& e) {
      --pool.booting;
      retry_pool_later(pool, e);
    };
    if (!reserved) return not_booted(reserved.error());
    SessionLimits limits = pool_limits(pool.config);
    HostGrant grant = HostGrant::of(limits, nofile_grant(config_.exec_nofile));
    if (stopping_) {
      admission_.release();
      return not_booted(Error{ErrorCode::capacity_exceeded, 0, "the daemon is stopping"});
    }
    if (auto g = admission_.take(grant); !g) {
      admission_.release();
      full_ = admission_.full();
      return not_booted(g.error());
    }
    auto session = std::make_shared<Session>();
    session->grant = grant;
    session->tmpl = tmpl;
    session->limits = limits;
    session->pool = &pool;
    session->record.id = store::new_id("s");
    if (auto ins = store_.insert_pooled(session->record.id, tmpl.name); !ins) {
      admission_.give_back(grant);
      admission_.release();
      full_ = admission_.full();
      return not_booted(ins.error());
    }
    runtime::InstanceSpec is = instance_spec(session->record.id, tmpl, limits);
    session->instance_spec = is;  // a reset after the claim boots it again
    auto began = Clock::now();
    asio::post(launcher_, [this, &pool, session, is, began] {
      auto instance = std::make_shared<Result<std::unique_ptr<runtime::Instance>>>(backend_->start(is));
      on_reactor([this, &pool, session, instance, began] {
        pooled_booted(pool, session, std::move(*instance), began);
      });
    });
  });
}

void SessionManager::pooled_booted(WarmPool& pool, std::shared_ptr<Session> session,
                                   Result<std::unique_ptr<runtime::Instance>> instance, Clock::time_point began) {
  assert_on_reactor();
  --pool.booting;
  if (instance) session->instance = std::move(*instance);
  if (!instance || stopping_) {
    Error why = instance ? Error{ErrorCode::capacity_exceeded, 0, "the daemon is stopping"} : instance.error();
    drop_pooled(pool, session, why.message());
    return retry_pool_later(pool, why);
  }
  add_sample(pool.refill_ms, ms_since(began));
  pool.last_error.clear();
  std::weak_ptr<Session> weak = session;
  session->instance->attach(reactor_, [this, weak](std::string why) {
    auto s = weak.lock();
    if (!s) return;
    if (s->pool) {
      WarmPool& p = *s->pool;
      drop_pooled(p, s, why);
      return fill_pools();
    }
    terminate(s, "failed", "init_died", why);
  });
  session->record.init_pid = session->instance->host_pid();
  session->record.slot = session->instance->slot();
  pool.ready.push_back(std::move(session));
}

// Ends a pooled sandbox that was never claimed: its slot and grant go back.
void SessionManager::drop_pooled(WarmPool& pool, std::shared_ptr<Session> session, const std::string& why) {
  assert_on_reactor();
  std::erase(pool.ready, session);
  session->ended = true;
  session->pool = nullptr;
  if (session->instance) {
    runtime::Teardown t = session->instance->destroy();
    if (!t.error.empty())
      std::fprintf(stderr, "cela: pooled %s: teardown: %s\n", session->record.id.c_str(), t.error.c_str());
    session->instance.reset();
  }
  if (auto r = store_.remove_pooled(session->record.id); !r)
    std::fprintf(stderr, "cela: pooled %s (%s): %s\n", session->record.id.c_str(), why.c_str(),
                 r.error().message().c_str());
  admission_.give_back(session->grant);
  admission_.release();
  full_ = admission_.full();
}

void SessionManager::drain_pools() {
  assert_on_reactor();
  for (auto& pool : pools_) {
    pool->retry.reset();
    auto ready = pool->ready;
    for (auto& s : ready) drop_pooled(*pool, s, "the daemon stopped");
  }
}

bool SessionManager::claim_pooled(const Caller& caller, const CreateSessionSpec& spec, Clock::time_point began,
                                  Done<SessionRecord>& done) {
  assert_on_reactor();
  if (!spec.use_pool || stopping_) return false;
  // Pooled sandboxes have the default writable layer, no volumes, no egress door and no
  // package settings.
  if (!spec.volumes.empty() || (spec.disk_kind && *spec.disk_kind != config_.disk.kind)) return false;
  if (spec.network.mode != "none" || spec.egress_door || spec.packages) return false;
  auto it = std::ranges::find_if(pools_, [&](const auto& p) { return p->matches(spec); });
  if (it == pools_.end()) return false;
  WarmPool& pool = **it;
  auto answer = [&](Result<SessionRecord> r) {
    done(std::move(r));
    return true;
  };
  auto tenant = store_.get_tenant(caller.tenant_id);
  if (!tenant) return answer(std::unexpected(tenant.error()));
  if (auto q = Admission::check_quota(store_, *tenant, spec.limits); !q) return answer(std::unexpected(q.error()));
  auto tmpl = rootfs::load_template(templates_, spec.template_name);
  if (!tmpl) return false;  // the cold path says why
  if (tmpl->start) return false;  // booted() runs it for a cold session (boot_pooled)
  if (tmpl->dev_only)
    if (auto ok = dev_template_allowed(caller, spec.template_name); !ok) return answer(std::unexpected(ok.error()));
  // Sandboxes of an older version of the template are replaced, not handed out.
  while (!pool.ready.empty() && pool.ready.front()->tmpl.version != tmpl->version)
    drop_pooled(pool, pool.ready.front(), "template " + tmpl->name + " has a new version");
  if (pool.ready.empty()) {
    ++pool.misses;
    obs::catalog::pool_hits().add({tmpl->name, "miss"});
    asio::post(reactor_, [this] { fill_pools(); });
    return false;
  }
  std::shared_ptr<Session> session = pool.ready.front();
  pool.ready.pop_front();

  // The session the caller asked for, around the sandbox: as admitted() and booted()
  // would have made it.
  Session& s = *session;
  s.pool = nullptr;
  s.limits = spec.limits;
  s.env = spec.env;
  s.allow_sudo = sudo_allowed(s.tmpl, spec.allow_sudo);
  s.auto_pause_s = spec.auto_pause_s;
  s.auto_resume = spec.auto_resume;
  s.pause_at_ttl = spec.pause_at_ttl;
  s.expires = Clock::now() + std::chrono::seconds(spec.limits.ttl_s);
  s.last_activity = Clock::now();
  s.files = spec.files.value_or(config_.files);
  (void)resolve_grants(caller, s, {});  // none (see matches): an empty redaction set
  SessionRecord& r = s.record;
  r.tenant_id = caller.tenant_id;
  r.state = std::string(store::session_state::ready);
  r.template_ref = s.tmpl.name + "@" + s.tmpl.version;
  r.limits = spec.limits;
  r.network = store::NetworkPolicy{};
  r.metadata = spec.metadata;
  r.spec = {.template_name = spec.template_name,
            .allow_sudo = s.allow_sudo,
            .disk_kind = config_.disk.kind,
            .volumes = {},
            .auto_pause_s = spec.auto_pause_s,
            .auto_resume = spec.auto_resume,
            .pause_at_ttl = spec.pause_at_ttl};
  int64_t now = store::now_ms();
  r.created_at = store::format_rfc3339(now);
  r.ready_at = r.created_at;
  r.expires_at = store::format_rfc3339(now + static_cast<int64_t>(spec.limits.ttl_s) * 1000);
  r.last_activity_at = r.created_at;
  r.idle_timeout_s = static_cast<int64_t>(spec.limits.idle_timeout_s);
  r.cgroup = "cela/" + r.id;
  double claim_ms = ms_since(began);
  r.startup_ms = static_cast<int64_t>(claim_ms);
  if (auto c = store_.claim_pooled(r); !c) {
    // Not recorded: the sandbox goes back to the pool unclaimed (it ran nothing).
    s.pool = &pool;
    SessionRecord unclaimed;
    unclaimed.id = r.id;
    unclaimed.init_pid = r.init_pid;
    unclaimed.slot = r.slot;
    r = std::move(unclaimed);
    s.timer.reset();
    pool.ready.push_front(session);
    return answer(std::unexpected(c.error()));
  }
  ++pool.hits;
  obs::catalog::pool_hits().add({s.tmpl.name, "hit"});
  add_sample(pool.claim_ms, claim_ms);
  s.timer = std::make_unique<asio::steady_timer>(reactor_);
  set_meter(r.id, s.instance->disk_meter(), 0);
  sessions_[r.id] = session;
  live_count_ = static_cast<int64_t>(sessions_.size());
  arm_session_timer(session);
  asio::post(reactor_, [this] { fill_pools(); });  // the refill boots on the launcher
  return answer(r);
}

}  // namespace cela::session
