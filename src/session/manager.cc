// SessionManager wiring: threads, create, lookups, terminate, shutdown (see manager.h
// for the thread rule; execs are in exec.cc, timers in timers.cc, recovery in
// recovery.cc).
#include "session/manager.h"

#include <sys/statfs.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <algorithm>
#include <cassert>
#include <cstdio>
#include <future>

#include "common/fs.h"
#include "common/nofile.h"
#include "runtime/jail.h"
#include "net/package_gateway.h"
#include "session/exec_env.h"
#include "session/packages.h"
#include "session/file_policy.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;
using store::SessionRecord;

namespace {
constexpr auto kRetryUnrecorded = std::chrono::seconds(2);

}  // namespace

// Always on (release builds too): a session touched off the reactor is a data race
// that would corrupt state silently; crash loudly instead.
void SessionManager::assert_on_reactor() const {
  if (!const_cast<asio::io_context&>(reactor_).get_executor().running_in_this_thread()) {
    std::fputs("cela: internal error: session state touched off the reactor thread\n", stderr);
    std::abort();
  }
}

SessionManager::SessionManager(const DaemonConfig& config, store::Store& store)
    : config_(config),
      published_(std::make_shared<const DaemonConfig>(config)),
      store_(store),
      volumes_(config.volumes_dir()),
      admission_(reactor_, config.max_sessions) {
  templates_.root = config.templates_dir;
  output_dir_ = config.state_dir + "/output";
}

Result<std::unique_ptr<SessionManager>> SessionManager::open(const DaemonConfig& config, store::Store& store) {
  std::unique_ptr<SessionManager> m(new SessionManager(config, store));
  runtime::JailOptions options;
  options.uid_slots = static_cast<uint32_t>(config.uid_slots);
  options.helpers = true;  // uploads and watches
  options.budgets.sigpending = config.budgets.sigpending;
  options.budgets.msgqueue_bytes = config.budgets.msgqueue_bytes;
  options.budgets.memlock_bytes = config.budgets.memlock_bytes;
  for (const auto& [name, value] : config.budgets.user_namespace) {
    auto& limits = options.budgets.user_ns;
    auto it = std::ranges::find_if(limits, [&](const auto& l) { return l.name == name; });
    if (it != limits.end()) it->value = value;
    else limits.push_back({name, value});
  }
  options.pty_max = static_cast<uint32_t>(config.budgets.ptys);
  // Violations are always counted; execs are watched only when the audit keeps them.
  options.watch = {.execs = config.audit.enabled && config.audit.process_exec, .violations = true};
  const BlockIoConfig& bio = config.block_io;
  runtime::BlockIoRequest io{static_cast<uint32_t>(bio.weight), bio.read_bps, bio.write_bps, bio.read_iops,
                             bio.write_iops, bio.devices};
  if (io.paths.empty()) io.paths = {config.templates_dir, config.state_dir};
  std::vector<std::string> notes;
  auto limits = runtime::resolve_block_io(io, notes);
  if (!limits) return std::unexpected(limits.error());
  for (const auto& note : notes) std::fprintf(stderr, "cela: %s\n", note.c_str());
  options.io = std::move(*limits);
  options.disks.dir = config.disks_dir();
  options.disks.ready_bytes = config.defaults.disk_mb << 20;
  // A daemon whose default is a tmpfs layer keeps no disks ready.
  options.disks.ready = config.disk.kind == "disk" ? config.disk.pool : 0;
  auto backend = runtime::open_jail_backend(options);
  if (!backend) return std::unexpected(backend.error());
  m->backend_ = std::move(*backend);
  for (const auto& note : m->backend_->notes()) std::fprintf(stderr, "cela: %s\n", note.c_str());
  auto capacity = HostCapacity::measure(config.admission);
  if (!capacity) return std::unexpected(capacity.error());
  if (!config.admission.ledger_dir.empty()) {
    auto ledger = HostLedger::open(config.admission.ledger_dir);
    if (!ledger) return fail(ErrorCode::system, "admission.ledger_dir: " + ledger.error().message());
    m->ledger_ = std::move(*ledger);
  }
  m->admission_.set_host(*capacity, config.admission, m->ledger_.get());  // before the reactor runs
  if (m->ledger_) {
    // Published before any session: a `cela run` keeps within this daemon's figures.
    if (auto d = m->ledger_->declare(*m->admission_.limit()); !d)
      return fail(ErrorCode::system, "admission.ledger_dir: " + d.error().message());
  }
  m->builds_ = std::make_unique<TemplateBuilds>(*m->backend_, m->catalog(), BuildLimits{},
                                                BuildAdmission{m->ledger_.get(), *m->admission_.limit()});
  if (auto r = m->open_egress(); !r) return std::unexpected(r.error());
  std::fprintf(stderr,
               "cela: admission: the host has %llu MiB, %llu pids, %llu open files; overcommit %g, %g, %g\n",
               static_cast<unsigned long long>(capacity->memory_mb), static_cast<unsigned long long>(capacity->pids),
               static_cast<unsigned long long>(capacity->files), config.admission.memory_overcommit,
               config.admission.pids_overcommit, config.admission.files_overcommit);
  if (m->ledger_) std::fprintf(stderr, "cela: admission: host-wide ledger %s\n", m->ledger_->dir().c_str());
  if (auto r = make_dirs(m->output_dir_, 0700); !r) return std::unexpected(r.error());
  if (!config.packages.debian_keyring.empty()) {
    auto keyring = read_file(config.packages.debian_keyring);
    if (!keyring) return fail(ErrorCode::invalid_argument, "packages.debian_keyring: " + keyring.error().message());
    m->package_keyring_ = std::move(*keyring);
  }
  auto unfinished = m->volumes_.open();
  if (!unfinished) return std::unexpected(unfinished.error());
  if (*unfinished) std::fprintf(stderr, "cela: volumes: removed %d unfinished create(s)\n", *unfinished);
  m->reactor_work_.emplace(asio::make_work_guard(m->reactor_));
  m->reactor_thread_ = std::thread([mp = m.get()] { mp->reactor_.run(); });
  m->launcher_work_.emplace(asio::make_work_guard(m->launcher_));
  for (int i = 0; i < config.launcher_threads; ++i)
    m->launcher_threads_.emplace_back([mp = m.get()] { mp->launcher_.run(); });
  m->on_reactor([mp = m.get()] {
    mp->arm_retention();
    mp->arm_audit_retention();
  });
  for (const PoolConfig& pool : config.pools) {
    m->pools_.push_back(std::make_unique<WarmPool>());
    m->pools_.back()->config = pool;
  }
  return m;
}

SessionManager::~SessionManager() { shutdown(); }

void SessionManager::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  auto barrier = [this] {
    std::promise<void> done;
    auto f = done.get_future();
    on_reactor([&] { done.set_value(); });
    f.wait();
  };
  {
    std::promise<void> done;
    auto f = done.get_future();
    on_reactor([&] {
      stopping_ = true;
      admission_.close(Error{ErrorCode::capacity_exceeded, 0, "the daemon is stopping"});
      std::vector<std::shared_ptr<Session>> live;
      for (auto& [id, s] : sessions_) live.push_back(s);
      for (auto& s : live) terminate(s, "terminated", "daemon_shutdown", "the daemon stopped");
      drain_pools();
      done.set_value();
    });
    f.wait();
  }
  builds_.reset();  // cancels the running build and waits for its sandbox to go
  // Boots still on the launcher come back to a stopping reactor, which ends them.
  launcher_work_.reset();
  for (auto& t : launcher_threads_)
    if (t.joinable()) t.join();
  if (storage_pool_) storage_pool_->join();  // snapshots in flight finish their copy
  barrier();
  egress_->stop();
  {
    std::promise<void> done;
    auto f = done.get_future();
    on_reactor([&] {
      retry_unrecorded();
      retry_timer_.reset();
      retention_timer_.reset();
      audit_retention_timer_.reset();
      done.set_value();
    });
    f.wait();
  }
  reactor_work_.reset();
  reactor_.stop();
  if (reactor_thread_.joinable()) reactor_thread_.join();
  observer_.join();
}

bool SessionManager::full() const { return full_.load(); }

void SessionManager::count_state(const std::string& tenant, const std::string& from, const std::string& to) {
  std::lock_guard lock(by_state_mu_);
  if (!from.empty())
    if (auto it = by_state_.find({tenant, from}); it != by_state_.end() && --it->second <= 0) by_state_.erase(it);
  if (!to.empty()) ++by_state_[{tenant, to}];
}

std::vector<std::pair<std::pair<std::string, std::string>, int64_t>> SessionManager::sessions_by_state() const {
  std::lock_guard lock(by_state_mu_);
  return {by_state_.begin(), by_state_.end()};
}

Result<void> SessionManager::dev_template_allowed(const Caller& caller, const std::string& name) const {
  // Dev-only templates show host files (the host's /usr, idmapped: files of other host
  // accounts readable by namespace root): only the host's own root, and only when the
  // operator asked for them.
  if (config_.dev_mode && caller.local_root) return {};
  return fail(ErrorCode::permission_denied,
              "template `" + name + "` is dev-only: it exists only on a daemon started in dev mode (`cela serve --dev`), "
              "for local root on the unix socket");
}

// ---- create ------------------------------------------------------------------------

void SessionManager::create(const Caller& caller, CreateSessionSpec spec, std::chrono::seconds wait,
                            Done<SessionRecord> done) {
  auto began = Clock::now();
  on_reactor([this, caller, spec = std::move(spec), wait, began, done = std::move(done)]() mutable {
    if (stopping_) return done(fail(ErrorCode::capacity_exceeded, "the daemon is stopping"));
    // Before anything is reserved (or the host template generated).
    if (spec.template_name == rootfs::kHostTemplate)
      if (auto ok = dev_template_allowed(caller, spec.template_name); !ok) return done(std::unexpected(ok.error()));
    if (claim_pooled(caller, spec, began, done)) return;  // a warm pool's ready session (pool.cc)
    admission_.reserve(wait, [this, caller, spec = std::move(spec), began, done = std::move(done)](
                                 Result<void> admitted_now) mutable {
      full_ = admission_.full();
      if (!admitted_now) return done(std::unexpected(admitted_now.error()));
      admitted(caller, std::move(spec), began, std::move(done));
    });
  });
}

void SessionManager::admitted(const Caller& caller, CreateSessionSpec spec, Clock::time_point began,
                              Done<SessionRecord> done) {
  assert_on_reactor();
  std::optional<HostGrant> granted;
  auto give_back = [&](const Error& e) {
    if (granted) admission_.give_back(*granted);
    admission_.release();
    full_ = admission_.full();
    done(std::unexpected(e));
  };
  if (stopping_) return give_back(Error{ErrorCode::capacity_exceeded, 0, "the daemon is stopping"});
  auto tenant = store_.get_tenant(caller.tenant_id);
  if (!tenant) return give_back(tenant.error());
  if (auto q = Admission::check_quota(store_, *tenant, spec.limits); !q) return give_back(q.error());
  HostGrant grant = HostGrant::of(spec.limits, nofile_grant(config_.exec_nofile));
  if (auto g = admission_.take(grant); !g) return give_back(g.error());
  granted = grant;
  auto tmpl = catalog().resolve(caller.tenant_id, spec.template_name);
  if (!tmpl) {
    if (tmpl.error().code == ErrorCode::not_found)
      return give_back(Error{ErrorCode::invalid_argument, 0, "unknown template `" + spec.template_name + "`"});
    return give_back(tmpl.error());
  }
  if (tmpl->dev_only)
    if (auto ok = dev_template_allowed(caller, spec.template_name); !ok) return give_back(ok.error());

  auto session = std::make_shared<Session>();
  if (spec.packages) {
    if (!packages_) return give_back(Error{ErrorCode::policy_denied, 0, "the package gateway is not running"});
    auto policy = net::narrow_policy(config_.packages.ceiling, *spec.packages);
    if (!policy) return give_back(policy.error());
    session->packages = std::move(*policy);
    spec.egress_door = true;  // the gateway answers through the door, network or not
  }
  if (auto r = egress_for(caller, spec, *session); !r) return give_back(r.error());
  session->grant = grant;
  session->tmpl = *tmpl;
  session->limits = spec.limits;
  session->env = session->door ? egress_env(!egress_ca_pem_.empty()) : std::vector<std::string>{};
  if (session->packages) {  // the create's own env comes after, and wins
    auto env = package_env();
    session->env.insert(session->env.end(), env.begin(), env.end());
  }
  session->env.insert(session->env.end(), spec.env.begin(), spec.env.end());
  session->allow_sudo = sudo_allowed(*tmpl, spec.allow_sudo);
  session->auto_pause_s = spec.auto_pause_s;
  session->auto_resume = spec.auto_resume;
  session->pause_at_ttl = spec.pause_at_ttl;
  session->expires = Clock::now() + std::chrono::seconds(spec.limits.ttl_s);
  session->files = spec.files.value_or(config_.files);
  if (auto g = resolve_grants(caller, *session, spec.secrets); !g) return give_back(g.error());
  session->last_activity = Clock::now();
  SessionRecord& r = session->record;
  r.id = store::new_id("s");
  r.tenant_id = caller.tenant_id;
  r.state = std::string(store::session_state::starting);
  r.template_ref = tmpl->name + "@" + tmpl->version;
  r.limits = spec.limits;
  r.network = spec.network;
  r.metadata = spec.metadata;
  std::string disk_kind = spec.disk_kind.value_or(config_.disk.kind);
  r.spec = {.template_name = spec.template_name,
            .allow_sudo = session->allow_sudo,
            .disk_kind = disk_kind,
            .volumes = spec.volumes,
            .auto_pause_s = spec.auto_pause_s,
            .auto_resume = spec.auto_resume,
            .pause_at_ttl = spec.pause_at_ttl};
  int64_t now = store::now_ms();
  r.created_at = store::format_rfc3339(now);
  r.expires_at = store::format_rfc3339(now + static_cast<int64_t>(spec.limits.ttl_s) * 1000);
  r.last_activity_at = r.created_at;
  r.idle_timeout_s = static_cast<int64_t>(spec.limits.idle_timeout_s);
  r.cgroup = "cela/" + r.id;
  if (auto v = claim_volumes(*session, spec.volumes); !v) return give_back(v.error());
  // Recorded before anything is started: a create the store cannot take changes
  // nothing (state dir full: a structured error, no sandbox, no quota held).
  if (auto ins = store_.insert_session(r); !ins) {
    release_volumes(*session);
    return give_back(ins.error());
  }
  count_state(r.tenant_id, "", r.state);

  runtime::InstanceSpec is = instance_spec(r.id, *tmpl, spec.limits);
  is.disk_kind = runtime::disk_kind(disk_kind).value_or(runtime::DiskKind::disk);
  is.volumes = session->instance_spec.volumes;  // claim_volumes filled them in
  is.door_port = session->door ? net::kDoorPort : 0;
  session->instance_spec = is;  // a reset boots the same again, door included
  ++booting_templates_[template_key(*tmpl)];
  asio::post(launcher_, [this, session, is, began, done = std::move(done)]() mutable {
    auto instance = std::make_shared<Result<std::unique_ptr<runtime::Instance>>>(start_instance(*session, is));
    on_reactor([this, session, instance, began, done = std::move(done)]() mutable {
      session->record.startup_ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count();
      booted(session, std::move(*instance), std::move(done));
    });
  });
}

Result<std::unique_ptr<runtime::Instance>> SessionManager::start_instance(const Session& session,
                                                                       const runtime::InstanceSpec& is) {
  auto instance = backend_->start(is);
  // Package manager settings are in place before anything runs (session.packages is
  // not changed after create).
  if (instance && session.packages)
    if (auto w = write_package_files(**instance, config_.packages, package_keyring_); !w) {
      (*instance)->destroy();
      return std::unexpected(w.error());
    }
  return instance;
}

runtime::InstanceSpec SessionManager::instance_spec(const std::string& id, const rootfs::Template& tmpl,
                                                   const SessionLimits& limits) const {
  runtime::InstanceSpec is;
  is.name = id;
  is.hostname = "cela-" + id.substr(2, 8);
  is.rootfs.layers = tmpl.layers;
  for (const auto& b : tmpl.binds) is.rootfs.binds.emplace_back(b.source, b.target);
  is.disk_bytes = limits.disk_mb << 20;
  is.disk_kind = runtime::disk_kind(config_.disk.kind).value_or(runtime::DiskKind::disk);  // a create may say
  is.limits = {limits.memory_mb << 20, limits.cpus, limits.pids};
  return is;
}

void SessionManager::booted(std::shared_ptr<Session> session, Result<std::unique_ptr<runtime::Instance>> instance,
                            Done<SessionRecord> done) {
  assert_on_reactor();
  if (auto it = booting_templates_.find(template_key(session->tmpl)); it != booting_templates_.end() && --it->second <= 0)
    booting_templates_.erase(it);
  SessionRecord& r = session->record;
  auto failed = [&](const Error& e, std::string reason, std::string message) {
    session->ended = true;
    if (session->instance) session->instance->destroy();
    session->instance.reset();
    r.state = std::string(store::session_state::failed);
    r.termination_reason = std::move(reason);
    r.termination_message = std::move(message);
    r.termination_at = store::now_rfc3339();
    release_volumes(*session);
    if (auto w = store_.set_terminated(r.id, r.state, r.termination_reason, r.termination_message, std::nullopt); !w) {
      std::lock_guard lock(unrecorded_mu_);
      unrecorded_[r.id] = r;
    }
    retry_unrecorded();
    admission_.give_back(session->grant);
    admission_.release();
    full_ = admission_.full();
    count_state(r.tenant_id, std::string(store::session_state::starting), "");
    observe_create_failed(r, r.termination_reason, r.termination_message);
    done(std::unexpected(e));
  };
  if (!instance) return failed(instance.error(), "start_failed", instance.error().message());
  session->instance = std::move(*instance);
  if (stopping_) {
    return failed(Error{ErrorCode::capacity_exceeded, 0, "the daemon is stopping"}, "daemon_shutdown",
                  "the daemon stopped while the session was starting");
  }
  if (auto d = open_session_door(*session); !d) return failed(d.error(), "start_failed", d.error().message());
  r.init_pid = session->instance->host_pid();
  r.slot = session->instance->slot();
  r.state = std::string(store::session_state::ready);
  r.ready_at = store::now_rfc3339();
  if (auto u = store_.update_session(r); !u) return failed(u.error(), "start_failed", u.error().message());
  if (auto g = install_grants(session); !g) {
    end_grants(*session, "start_failed");
    return failed(g.error(), "start_failed", g.error().message());
  }
  std::weak_ptr<Session> weak = session;
  session->instance->attach(reactor_, [this, weak](std::string why) {
    if (auto s = weak.lock()) terminate(s, "failed", "init_died", why);
  });
  session->timer = std::make_unique<asio::steady_timer>(reactor_);
  if (session->packages && packages_) packages_->add_session(r.id, r.tenant_id, *session->packages);
  set_meter(r.id, session->instance->disk_meter(), 0);
  sessions_[r.id] = session;
  live_count_ = static_cast<int64_t>(sessions_.size());
  count_state(r.tenant_id, std::string(store::session_state::starting), r.state);
  observe_created(session);
  arm_session_timer(session);
  if (session->tmpl.start) {  // handed out once the template's server runs
    return run_start_command(session, [this, session, done = std::move(done)](Result<void> ok) {
      if (!ok) {
        terminate(session, "failed", "start_failed", ok.error().message());
        return done(std::unexpected(ok.error()));
      }
      done(session->record);
    });
  }
  done(r);
}

// ---- terminate -----------------------------------------------------------------------

void SessionManager::terminate(const std::shared_ptr<Session>& session, std::string state, std::string reason,
                               std::string message) {
  assert_on_reactor();
  if (session->ended) return;
  session->ended = true;
  // Execs still running end with the session, saying why.
  for (auto& [id, e] : session->execs) {
    if (e->finished) continue;
    e->observed.session_ended = reason;
    e->observed.session_message = message;
    if (e->exec) e->exec->stop_output();
    e->out_eof = e->err_eof = true;
    exec_finished(*e);
  }
  session->timer.reset();
  if (session->door) egress_->close_door(session->record.id);
  // Before the sandbox goes: its secret files are overwritten, then removed.
  uint64_t secrets_wiped = end_grants(*session, reason);
  runtime::Teardown teardown;
  if (session->instance) teardown = session->instance->destroy();
  for (auto& [id, e] : session->execs) e->exec.reset();
  session->instance.reset();
  CleanupReport cleanup;
  cleanup.processes_killed = teardown.processes_killed;
  cleanup.cgroup_removed = teardown.cgroup_removed;
  cleanup.mounts_removed = true;  // they lived only in the session's mount namespace
  cleanup.upper_dir_freed = session->instance_spec.disk_kind == runtime::DiskKind::memory || teardown.disk_freed;
  cleanup.disk_used_bytes = teardown.disk.used_bytes;
  cleanup.disk_written_bytes = teardown.disk.written_bytes;
  cleanup.volumes_released = teardown.volumes_released;
  cleanup.secrets_wiped = secrets_wiped;
  cleanup.error = teardown.error;
  release_volumes(*session);
  drop_meter(session->record.id);
  SessionRecord& r = session->record;
  count_state(r.tenant_id, r.state, "");
  r.state = std::move(state);
  r.termination_reason = std::move(reason);
  r.termination_message = std::move(message);
  r.termination_at = store::now_rfc3339();
  r.cleanup = cleanup;
  if (auto w = store_.set_terminated(r.id, r.state, r.termination_reason, r.termination_message, r.cleanup); !w) {
    std::fprintf(stderr, "cela: recording the end of %s failed (%s); retrying\n", r.id.c_str(),
                 w.error().message().c_str());
    {
      std::lock_guard lock(unrecorded_mu_);
      unrecorded_[r.id] = r;
    }
    retry_unrecorded();
  }
  if (session->packages && packages_) packages_->remove_session(r.id);
  if (teardown.release_disk) release_disk_later(session, std::move(teardown.release_disk), true);
  observe_terminated(*session);
  sessions_.erase(r.id);
  live_count_ = static_cast<int64_t>(sessions_.size());
  admission_.give_back(session->grant);
  admission_.release();
  full_ = admission_.full();
}

// Writes the final records the store refused earlier; re-arms itself while any is left.
void SessionManager::retry_unrecorded() {
  assert_on_reactor();
  for (auto it = pending_execs_.begin(); it != pending_execs_.end();) {
    auto& recs = it->second;
    std::erase_if(recs, [&](const store::ExecRecord& rec) { return bool(store_.finish_exec(rec)); });
    it = recs.empty() ? pending_execs_.erase(it) : std::next(it);
  }
  std::lock_guard lock(unrecorded_mu_);
  for (auto it = unrecorded_.begin(); it != unrecorded_.end();) {
    const SessionRecord& r = it->second;
    auto w = store_.set_terminated(r.id, r.state, r.termination_reason, r.termination_message, r.cleanup);
    if (!w) {
      ++it;
      continue;
    }
    it = unrecorded_.erase(it);
  }
  if (unrecorded_.empty() && pending_execs_.empty()) return;
  if (stopping_ && !reactor_work_) return;
  if (!retry_timer_) retry_timer_ = std::make_unique<asio::steady_timer>(reactor_);
  retry_timer_->expires_after(kRetryUnrecorded);
  retry_timer_->async_wait([this](boost::system::error_code ec) {
    if (!ec) retry_unrecorded();
  });
}

// ---- lookups -------------------------------------------------------------------------

Result<std::shared_ptr<Session>> SessionManager::find_live(const Caller& caller, const std::string& id) {
  assert_on_reactor();
  if (auto it = sessions_.find(id); it != sessions_.end() && it->second->record.tenant_id == caller.tenant_id) {
    if (it->second->resetting) return fail(ErrorCode::conflict, "session " + id + " is being reset; retry");
    return it->second;
  }
  {
    std::lock_guard lock(unrecorded_mu_);
    if (auto it = unrecorded_.find(id); it != unrecorded_.end() && it->second.tenant_id == caller.tenant_id)
      return fail(ErrorCode::gone, "session " + id + " has ended: " + it->second.termination_reason);
  }
  auto rec = store_.get_session(caller.tenant_id, id);
  if (!rec) {
    if (rec.error().code == ErrorCode::not_found) return fail(ErrorCode::not_found, "no session " + id);
    return std::unexpected(rec.error());
  }
  return fail(ErrorCode::gone, "session " + id + " has ended: " + rec->termination_reason +
                                   (rec->termination_message.empty() ? "" : " (" + rec->termination_message + ")"));
}

void SessionManager::check_live(const Caller& caller, const std::string& id, Done<void> done) {
  on_reactor([this, caller, id, done = std::move(done)] {
    auto found = find_live(caller, id);
    if (!found) return done(std::unexpected(found.error()));
    if ((*found)->ended) return done(fail(ErrorCode::gone, "session " + id + " has ended"));
    done({});
  });
}

Result<SessionRecord> SessionManager::get(const Caller& caller, const std::string& id) {
  {
    std::lock_guard lock(unrecorded_mu_);
    if (auto it = unrecorded_.find(id); it != unrecorded_.end() && it->second.tenant_id == caller.tenant_id)
      return it->second;
  }
  auto rec = store_.get_session(caller.tenant_id, id);
  if (!rec && rec.error().code == ErrorCode::not_found) return fail(ErrorCode::not_found, "no session " + id);
  if (rec) fill_disk(*rec);
  return rec;
}

Result<store::SessionPage> SessionManager::list(const Caller& caller, const store::SessionFilter& filter,
                                                const store::PageRequest& page) {
  auto p = store_.list_sessions(caller.tenant_id, filter, page);
  if (!p) return p;
  std::lock_guard lock(unrecorded_mu_);
  for (auto& r : p->records) {
    if (auto it = unrecorded_.find(r.id); it != unrecorded_.end()) r = it->second;
    fill_disk(r);
  }
  return p;
}

void SessionManager::set_package_gateway(std::shared_ptr<net::PackageGateway> gateway) {
  packages_ = gateway;
  egress_->add_service(std::move(gateway));
}

Result<store::PackageInstallPage> SessionManager::package_installs(const Caller& caller, const std::string& session_id,
                                                                  const store::PageRequest& page) {
  return store_.list_package_installs(caller.tenant_id, session_id, page);
}

void SessionManager::patch(const Caller& caller, const std::string& id, PatchSpec spec, Done<SessionRecord> done) {
  on_reactor([this, caller, id, spec, done = std::move(done)] {
    auto found = find_live(caller, id);
    if (!found) return done(std::unexpected(found.error()));
    Session& s = **found;
    if (spec.network_allow || spec.network_deny)
      if (auto r = patch_network(s, spec); !r) return done(std::unexpected(r.error()));
    if (!spec.ttl_s) return done(s.record);
    if (*spec.ttl_s < 1 || *spec.ttl_s > config_.maxima.ttl_s)
      return done(fail(ErrorCode::invalid_argument,
                       "field `ttl_s` must be between 1 and " + std::to_string(config_.maxima.ttl_s)));
    // ttl_s counts from now: the session lives ttl_s more seconds.
    SessionRecord next = s.record;
    next.expires_at = store::format_rfc3339(store::now_ms() + static_cast<int64_t>(*spec.ttl_s) * 1000);
    next.limits.ttl_s = *spec.ttl_s;
    if (auto u = store_.update_session(next); !u) return done(std::unexpected(u.error()));
    s.record = std::move(next);
    s.limits.ttl_s = *spec.ttl_s;
    s.expires = Clock::now() + std::chrono::seconds(*spec.ttl_s);
    s.parked = false;
    arm_session_timer(*found);
    done(s.record);
  });
}

void SessionManager::remove(const Caller& caller, const std::string& id, Done<SessionRecord> done) {
  on_reactor([this, caller, id, done = std::move(done)]() mutable {
    std::shared_ptr<Session> ending;
    if (auto it = sessions_.find(id); it != sessions_.end() && it->second->record.tenant_id == caller.tenant_id) {
      ending = it->second;
      terminate(ending, "terminated", "deleted", "deleted through the API");
    }
    // The answer waits (holding no thread) for the disk layer's release, so that its
    // cleanup report can say the loop device let go.
    if (ending && ending->disk_pending) {
      ending->after_release.push_back([this, caller, id, done = std::move(done)]() mutable {
        remove(caller, id, std::move(done));
      });
      return;
    }
    std::unique_lock lock(unrecorded_mu_);
    if (auto it = unrecorded_.find(id); it != unrecorded_.end() && it->second.tenant_id == caller.tenant_id) {
      lock.unlock();
      // Ended, but not yet in the store: never answer 200 for a record that could be
      // lost. The retry writes it once the state dir has room.
      Error e{ErrorCode::capacity_exceeded, 0,
              "session " + id + " has ended but its record could not be written yet (state dir full?); retry"};
      return done(std::unexpected(e));
    }
    lock.unlock();
    auto rec = store_.get_session(caller.tenant_id, id);
    if (!rec) {
      if (rec.error().code == ErrorCode::not_found) return done(fail(ErrorCode::not_found, "no session " + id));
      return done(std::unexpected(rec.error()));
    }
    done(*rec);
  });
}

Result<SessionManager::FsView> SessionManager::fs_view(const Caller& caller, const std::string& session_id,
                                                       bool for_upload, std::optional<uint64_t> declared,
                                                       ExecUser as) {
  std::promise<Result<FsView>> promise;
  auto f = promise.get_future();
  // Waits for the reactor only (it never blocks on sandbox code), and for the thaw of a
  // paused session with auto_resume (a kernel operation, bounded by kFreezeTimeout).
  std::function<void()> take = [&] {
    auto found = find_live(caller, session_id);
    if (!found) return promise.set_value(std::unexpected(found.error()));
    Session& s = **found;
    if (!running_or_later(s, [&](Result<void> r) {
          if (!r) return promise.set_value(std::unexpected(r.error()));
          take();  // running again: the same lookup
        }))
      return;
    if (!s.instance) return promise.set_value(fail(ErrorCode::gone, "session " + session_id + " has ended"));
    auto root = s.instance->open_root();
    if (!root) return promise.set_value(std::unexpected(root.error()));
    s.last_activity = Clock::now();
    FsView view;
    view.root = std::move(*root);
    Identity who = identity_for(s.tmpl.user, as);
    view.uid = s.instance->host_id(who.uid);
    view.gid = s.instance->host_id(who.gid);
    view.inside_uid = who.uid;
    view.inside_gid = who.gid;
    view.id_base = s.instance->host_id(0);
    view.account = who.name;
    view.home = who.home;
    view.files = s.files;
    view.redactions = s.redactions;
    if (for_upload) {
      if (!s.writers) {
        auto writers = s.instance->writer_launcher();
        if (!writers) return promise.set_value(std::unexpected(writers.error()));
        s.writers = std::move(*writers);
      }
      view.writers = s.writers;
      // A disk-backed layer's pages are page cache, not the session's memory.
      if (declared && *declared >= kMemoryCheckBytes && s.instance->disk_kind() == runtime::DiskKind::memory) {
        view.memory_limit = s.limits.memory_mb << 20;
        if (auto st = s.instance->stats(); st) view.memory_current = st->memory_current_bytes;
      }
    }
    promise.set_value(std::move(view));
  };
  on_reactor([&] { take(); });
  return f.get();
}

FsLimits SessionManager::fs_limits() const {
  FsLimits limits;
  limits.max_file_bytes = config_.max_upload_bytes;
  limits.max_archive_bytes = config_.max_upload_bytes;
  return limits;
}

Result<std::shared_ptr<SessionFs>> SessionManager::files(const Caller& caller, const std::string& session_id,
                                                        ExecUser as) {
  auto view = fs_view(caller, session_id, false, std::nullopt, as);
  if (!view) return std::unexpected(view.error());
  FsLimits limits = fs_limits();
  limits.max_file_bytes = view->files.max_export_bytes;
  limits.max_archive_bytes = view->files.max_export_bytes;
  auto fs = std::make_shared<SessionFs>(std::move(view->root), view->uid, view->gid, limits,
                                        policy_roots(view->files.writable));
  fs->set_id_base(view->id_base);
  fs->set_account(view->account, view->home);
  apply_file_policy(*fs, *view);
  return fs;
}

Result<std::shared_ptr<DirWatch>> SessionManager::open_watch(const Caller& caller, const std::string& session_id,
                                                             const std::string& path, bool recursive, ExecUser as) {
  auto view = fs_view(caller, session_id, true, std::nullopt, as);
  if (!view) return std::unexpected(view.error());
  // The path is checked here first, so a missing or wrong one is answered plainly.
  int root = ::fcntl(view->root.get(), F_DUPFD_CLOEXEC, 3);
  if (root < 0) return sys_fail("dup the session root");
  SessionFs fs(UniqueFd(root), view->uid, view->gid, fs_limits(), policy_roots(view->files.writable));
  apply_file_policy(fs, *view);
  auto st = fs.stat(path);
  if (!st) return std::unexpected(st.error());
  if (st->type != "dir" && st->type != "symlink") return fail(ErrorCode::invalid_argument, "not a directory: " + path);
  std::vector<std::string> args{kWatchCommand, path, recursive ? "1" : "0", std::to_string(view->inside_uid),
                                std::to_string(view->inside_gid), std::to_string(kMaxWatchedDirs)};
  auto helper = view->writers->start_helper(args, std::move(view->root));
  if (!helper) return std::unexpected(helper.error());
  return std::make_shared<DirWatch>(reactor_.get_executor(), std::move(*helper), path);
}

Result<void> SessionManager::check_declared(const FsView& view, std::optional<uint64_t> declared) const {
  if (!declared) return {};  // the per-request limit was checked before the view was taken
  // The writable layer is a tmpfs: free blocks of the overlay's upper, and its pages
  // count against the session's memory limit.
  struct statfs fs {};
  if (::fstatfs(view.root.get(), &fs) != 0) return sys_fail("statfs the session root");
  UploadRoom room;
  room.disk_free = static_cast<uint64_t>(fs.f_bavail) * static_cast<uint64_t>(fs.f_bsize);
  if (view.memory_limit)
    room.memory_free = view.memory_limit > view.memory_current ? view.memory_limit - view.memory_current : 0;
  return check_room(*declared, room);
}

Result<std::unique_ptr<Upload>> SessionManager::open_upload(const Caller& caller, const std::string& session_id,
                                                            const std::string& path, const WriteOptions& options,
                                                            std::optional<uint64_t> declared_bytes, ExecUser as) {
  if (declared_bytes && *declared_bytes > config_.max_upload_bytes)
    return fail(ErrorCode::limit, "file larger than " + std::to_string(config_.max_upload_bytes) + " bytes: " + path);
  auto view = fs_view(caller, session_id, true, declared_bytes, as);
  if (!view) return std::unexpected(view.error());
  uint64_t cap = std::min(config_.max_upload_bytes, view->files.max_upload_bytes);
  if (declared_bytes && *declared_bytes > cap)
    return fail(ErrorCode::limit, "file larger than this session's upload limit of " + std::to_string(cap) +
                                      " bytes: " + path);
  if (auto r = check_declared(*view, declared_bytes); !r) return std::unexpected(r.error());
  FsLimits limits = fs_limits();
  limits.max_file_bytes = cap;
  SessionFs fs(std::move(view->root), view->uid, view->gid, limits, policy_roots(view->files.writable));
  apply_file_policy(fs, *view);
  auto file = fs.open_upload(path, options);
  if (!file) return std::unexpected(file.error());
  auto fd = file->hand_over();
  if (!fd) return std::unexpected(fd.error());
  auto writer = view->writers->start(std::move(*fd), view->uid, view->gid);
  if (!writer) return std::unexpected(writer.error());
  return std::make_unique<Upload>(std::move(*file), std::move(*writer));
}

Result<std::unique_ptr<ArchiveImport>> SessionManager::open_import(const Caller& caller, const std::string& session_id,
                                                                   const std::string& path,
                                                                   std::optional<uint64_t> declared_bytes) {
  if (declared_bytes && *declared_bytes > config_.max_upload_bytes)
    return fail(ErrorCode::limit, "archive larger than " + std::to_string(config_.max_upload_bytes) + " bytes");
  auto view = fs_view(caller, session_id, true, declared_bytes);
  if (!view) return std::unexpected(view.error());
  uint64_t cap = std::min(config_.max_upload_bytes, view->files.max_upload_bytes);
  if (declared_bytes && *declared_bytes > cap)
    return fail(ErrorCode::limit, "archive larger than this session's upload limit of " + std::to_string(cap) + " bytes");
  if (auto r = check_declared(*view, declared_bytes); !r) return std::unexpected(r.error());
  // A missing or wrong target is answered before the body.
  auto root = ::fcntl(view->root.get(), F_DUPFD_CLOEXEC, 3);
  if (root < 0) return sys_fail("dup the session root");
  SessionFs fs(UniqueFd(root), view->uid, view->gid, fs_limits(), policy_roots(view->files.writable));
  apply_file_policy(fs, *view);
  if (auto w = fs.check_import_target(path); !w) return std::unexpected(w.error());
  auto st = fs.stat(path);
  if (!st) return std::unexpected(st.error());
  if (st->type != "dir" && st->type != "symlink")
    return fail(ErrorCode::invalid_argument, "not a directory: " + path);
  FsLimits limits = fs_limits();
  limits.max_archive_bytes = cap;
  std::vector<std::string> args{kTarImportCommand,
                                path,
                                std::to_string(view->inside_uid),
                                std::to_string(view->inside_gid),
                                std::to_string(limits.max_archive_bytes),
                                std::to_string(limits.max_archive_entries),
                                std::to_string(limits.max_depth)};
  auto helper = view->writers->start_helper(args, std::move(view->root));
  if (!helper) return std::unexpected(helper.error());
  return std::make_unique<ArchiveImport>(std::move(*helper));
}

}  // namespace cela::session
