// Storage of sessions: volumes (claimed by a create, given back at the end; the API's
// create, list, get and delete), the writable-layer meters get() reads, and reset.
#include <boost/asio/post.hpp>
#include <algorithm>
#include <cstdio>

#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;
using store::SessionRecord;

namespace {
std::string volume_key(const std::string& tenant_id, const std::string& name) { return tenant_id + "/" + name; }
}  // namespace

// ---- volumes of a session

Result<void> SessionManager::claim_volumes(Session& session, const std::vector<VolumeMountSpec>& volumes) {
  assert_on_reactor();
  const std::string& tenant = session.record.tenant_id;
  std::vector<runtime::VolumeSpec> specs;
  for (const VolumeMountSpec& v : volumes) {
    auto record = volumes_.get(tenant, v.name);
    if (!record) {
      if (record.error().code == ErrorCode::not_found)
        return fail(ErrorCode::invalid_argument, "unknown volume `" + v.name + "`");
      return std::unexpected(record.error());
    }
    std::lock_guard lock(volume_mu_);
    auto it = volume_users_.find(volume_key(tenant, v.name));
    if (!v.read_only && it != volume_users_.end() && !it->second.writer.empty())
      return fail(ErrorCode::conflict, "volume `" + v.name + "` is mounted read-write by session " +
                                           it->second.writer + " (one writer at a time)");
    specs.push_back({volumes_.image_path(tenant, v.name), v.path, v.read_only});
  }
  std::lock_guard lock(volume_mu_);
  for (const VolumeMountSpec& v : volumes) {
    VolumeUsers& users = volume_users_[volume_key(tenant, v.name)];
    if (v.read_only) users.readers.push_back(session.record.id);
    else users.writer = session.record.id;
  }
  session.instance_spec.volumes = std::move(specs);
  return {};
}

void SessionManager::release_volumes(Session& session) {
  assert_on_reactor();
  std::lock_guard lock(volume_mu_);
  for (const VolumeMountSpec& v : session.record.spec.volumes) {
    auto it = volume_users_.find(volume_key(session.record.tenant_id, v.name));
    if (it == volume_users_.end()) continue;
    if (it->second.writer == session.record.id) it->second.writer.clear();
    std::erase(it->second.readers, session.record.id);
    if (it->second.writer.empty() && it->second.readers.empty()) volume_users_.erase(it);
  }
}

// ---- disk meters

void SessionManager::set_meter(const std::string& id, std::shared_ptr<runtime::DiskMeter> meter, uint64_t resets) {
  std::lock_guard lock(meters_mu_);
  meters_[id] = {std::move(meter), resets};
}

void SessionManager::drop_meter(const std::string& id) {
  std::lock_guard lock(meters_mu_);
  meters_.erase(id);
}

void SessionManager::fill_disk(SessionRecord& record) const {
  {
    std::lock_guard lock(meters_mu_);
    if (auto it = meters_.find(record.id); it != meters_.end()) {
      runtime::DiskUsage u = it->second.meter->usage();
      record.disk_used_bytes = u.used_bytes;
      record.disk_written_bytes = u.written_bytes;
      record.resets = it->second.resets;
      return;
    }
  }
  if (record.cleanup) {
    record.disk_used_bytes = record.cleanup->disk_used_bytes;
    record.disk_written_bytes = record.cleanup->disk_written_bytes;
  }
}

// ---- reset

void SessionManager::reset(const Caller& caller, const std::string& id, Done<SessionRecord> done) {
  auto began = std::chrono::steady_clock::now();
  on_reactor([this, caller, id, began, done = std::move(done)]() mutable {
    auto found = find_live(caller, id);  // conflict while a reset runs
    if (!found) return done(std::unexpected(found.error()));
    std::shared_ptr<Session> session = *found;
    if (stopping_) return done(fail(ErrorCode::capacity_exceeded, "the daemon is stopping"));
    if (!session->instance) return done(fail(ErrorCode::gone, "session " + id + " has ended"));
    session->resetting = true;
    for (auto& [eid, e] : session->execs) {
      if (e->finished) continue;
      e->observed.session_ended = "reset";
      e->observed.session_message = "the session was reset to its template's state";
      if (e->exec) e->exec->stop_output();
      e->out_eof = e->err_eof = true;
      exec_finished(*e);
    }
    // The old sandbox goes whole: processes, cgroup, writable layer (its image and loop
    // device), its use of the volumes (they stay claimed by this session).
    if (session->door) egress_->close_door(id);  // rebooted() opens the new sandbox's
    runtime::Teardown teardown = session->instance->destroy();
    if (teardown.release_disk) release_disk_later(session, std::move(teardown.release_disk), false);
    for (auto& [eid, e] : session->execs) e->exec.reset();
    session->instance.reset();
    session->writers.reset();
    asio::post(launcher_, [this, session, began, done = std::move(done)]() mutable {
      auto instance =
          std::make_shared<Result<std::unique_ptr<runtime::Instance>>>(start_instance(*session, session->instance_spec));
      on_reactor([this, session, instance, began, done = std::move(done)]() mutable {
        rebooted(session, std::move(*instance), began, std::move(done));
      });
    });
  });
}

void SessionManager::rebooted(std::shared_ptr<Session> session, Result<std::unique_ptr<runtime::Instance>> instance,
                              std::chrono::steady_clock::time_point began, Done<SessionRecord> done) {
  assert_on_reactor();
  session->resetting = false;
  SessionRecord& r = session->record;
  if (session->ended || stopping_) {
    // Deleted (or the daemon stopping) while the new sandbox booted.
    if (instance && *instance) (*instance)->destroy();
    if (!session->ended) terminate(session, "terminated", "daemon_shutdown", "the daemon stopped during a reset");
    return done(fail(ErrorCode::gone, "session " + r.id + " ended during its reset"));
  }
  if (!instance) {
    Error e = instance.error();
    terminate(session, "failed", "reset_failed", e.message());
    return done(std::unexpected(e));
  }
  session->instance = std::move(*instance);
  // What create put into the sandbox besides the template comes back: the egress door
  // (and the extra CA) and the files of live secret grants.
  if (auto d = open_session_door(*session); !d) {
    terminate(session, "failed", "reset_failed", d.error().message());
    return done(std::unexpected(d.error()));
  }
  if (auto g = write_grant_files(*session); !g) {
    terminate(session, "failed", "reset_failed", g.error().message());
    return done(std::unexpected(g.error()));
  }
  r.init_pid = session->instance->host_pid();
  r.slot = session->instance->slot();
  r.startup_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count();
  r.state = std::string(store::session_state::ready);
  r.last_activity_at = store::now_rfc3339();
  session->last_activity = Clock::now();
  ++r.resets;
  if (auto u = store_.update_session(r); !u) {
    terminate(session, "failed", "reset_failed", u.error().message());
    return done(std::unexpected(u.error()));
  }
  std::weak_ptr<Session> weak = session;
  session->instance->attach(reactor_, [this, weak](std::string why) {
    if (auto s = weak.lock()) terminate(s, "failed", "init_died", why);
  });
  set_meter(r.id, session->instance->disk_meter(), r.resets);
  arm_session_timer(session);
  observe_change(*session, "session.reset", {{"resets", r.resets}, {"startup_ms", r.startup_ms.value_or(0)}});
  SessionRecord out = r;
  fill_disk(out);
  if (session->tmpl.start) {  // the template's server runs again in the new sandbox
    return run_start_command(session, [this, session, out, done = std::move(done)](Result<void> ok) {
      if (!ok) {
        terminate(session, "failed", "reset_failed", ok.error().message());
        return done(std::unexpected(ok.error()));
      }
      done(out);
    });
  }
  done(out);
}

void SessionManager::release_disk_later(std::shared_ptr<Session> session, std::function<bool()> release,
                                        bool record) {
  assert_on_reactor();
  if (record) session->disk_pending = true;
  asio::post(launcher_, [this, session, release = std::move(release), record] {
    bool detached = release();
    if (!record) return;
    on_reactor([this, session, detached] {
      session->disk_pending = false;
      SessionRecord& r = session->record;
      if (r.cleanup) {
        r.cleanup->loop_detached = detached;
        if (!detached) r.cleanup->error += (r.cleanup->error.empty() ? "" : "; ") + std::string("loop device still bound");
        bool stored = false;
        {
          std::lock_guard lock(unrecorded_mu_);
          if (auto it = unrecorded_.find(r.id); it != unrecorded_.end()) it->second.cleanup = r.cleanup, stored = true;
        }
        if (!stored)
          if (auto w = store_.set_cleanup(r.id, *r.cleanup); !w)
            std::fprintf(stderr, "cela: recording the disk cleanup of %s: %s\n", r.id.c_str(), w.error().message().c_str());
      }
      auto waiting = std::move(session->after_release);
      session->after_release.clear();
      for (auto& f : waiting) f();
    });
  });
}

// ---- the volumes API

VolumeInfo SessionManager::volume_info(rootfs::VolumeRecord record) const {
  VolumeInfo info;
  {
    std::lock_guard lock(volume_mu_);
    if (auto it = volume_users_.find(volume_key(record.tenant_id, record.name)); it != volume_users_.end()) {
      info.writer = it->second.writer;
      info.readers = it->second.readers;
    }
  }
  info.record = std::move(record);
  return info;
}

Result<VolumeInfo> SessionManager::create_volume(const Caller& caller, const std::string& name, uint64_t size_mb) {
  if (!rootfs::valid_volume_name(name))
    return fail(ErrorCode::invalid_argument,
                "field `name` must be 1-63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit");
  if (size_mb < 16 || size_mb > config_.volumes.max_size_mb)
    return fail(ErrorCode::invalid_argument,
                "field `size_mb` must be between 16 and " + std::to_string(config_.volumes.max_size_mb));
  auto existing = volumes_.list(caller.tenant_id);
  if (!existing) return std::unexpected(existing.error());
  if (existing->size() >= config_.volumes.max_per_tenant)
    return fail(ErrorCode::quota_exceeded, "the tenant has " + std::to_string(existing->size()) + " volumes, the most allowed");
  // The root of a new volume belongs to the default template's user, as the
  // sandbox sees it (volumes are mounted idmapped: these are in-sandbox ids).
  uint32_t uid = 1000, gid = 1000;
  if (auto t = rootfs::load_template(templates_, config_.default_template); t) uid = t->user.uid, gid = t->user.gid;
  auto image = volumes_.begin_create(caller.tenant_id, name);
  if (!image) return std::unexpected(image.error());
  if (auto r = runtime::make_volume_image(*image, size_mb << 20, uid, gid); !r) {
    (void)volumes_.remove(caller.tenant_id, name);
    return std::unexpected(r.error());
  }
  auto record = volumes_.commit(caller.tenant_id, name, size_mb);
  if (!record) {
    (void)volumes_.remove(caller.tenant_id, name);
    return std::unexpected(record.error());
  }
  return volume_info(std::move(*record));
}

Result<std::vector<VolumeInfo>> SessionManager::list_volumes(const Caller& caller) {
  auto records = volumes_.list(caller.tenant_id);
  if (!records) return std::unexpected(records.error());
  std::vector<VolumeInfo> out;
  for (auto& r : *records) out.push_back(volume_info(std::move(r)));
  return out;
}

Result<VolumeInfo> SessionManager::get_volume(const Caller& caller, const std::string& name) {
  auto record = volumes_.get(caller.tenant_id, name);
  if (!record) return std::unexpected(record.error());
  return volume_info(std::move(*record));
}

void SessionManager::delete_volume(const Caller& caller, const std::string& name, Done<VolumeInfo> done) {
  on_reactor([this, caller, name, done = std::move(done)] {
    auto record = volumes_.get(caller.tenant_id, name);
    if (!record) return done(std::unexpected(record.error()));
    VolumeInfo info = volume_info(*record);
    // On the reactor, where sessions claim volumes: no create can take it meanwhile.
    if (!info.writer.empty() || !info.readers.empty())
      return done(fail(ErrorCode::conflict, "volume `" + name + "` is mounted by a live session"));
    if (backend_->volume_in_use(volumes_.image_path(caller.tenant_id, name)))
      return done(fail(ErrorCode::conflict, "volume `" + name + "` is still mounted"));
    if (auto r = volumes_.remove(caller.tenant_id, name); !r) return done(std::unexpected(r.error()));
    done(info);
  });
}

}  // namespace cela::session
