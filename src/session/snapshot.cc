// Snapshots (a session's writable layer becomes a template version) and removing
// template versions: the two template operations that need the live sessions.
#include <fcntl.h>
#include <unistd.h>

#include <future>

#include "rootfs/layers.h"
#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;

namespace {

// On the storage thread: the copy, its digest and the new version.
Result<rootfs::Template> capture(const rootfs::TemplateStore& store, const std::string& name,
                                 const rootfs::Template& parent, UniqueFd upper, rootfs::IdShift shift,
                                 const std::string& session_id, const std::string& tenant_id) {
  auto lock = rootfs::StoreLock::shared(store);
  if (!lock) return std::unexpected(lock.error());
  auto layer = rootfs::StagedLayer::create(store);
  if (!layer) return std::unexpected(layer.error());
  auto bytes = rootfs::copy_layer_tree(upper.get(), layer->dir(), shift);
  if (!bytes) return std::unexpected(bytes.error());
  upper.reset();
  auto digest = rootfs::layer_digest(layer->dir());
  if (!digest) return std::unexpected(digest.error());
  auto path = layer->commit(digest->substr(7));  // same content, same layer
  if (!path) return std::unexpected(path.error());
  rootfs::Template t = parent;
  t.layers.push_back(*path);
  t.layer_meta.push_back({*digest, *bytes, "snapshot of " + session_id});
  t.size_bytes = parent.size_bytes + *bytes;
  t.parent = parent.name + "@" + parent.version;
  t.source = "snapshot";
  t.recipe.clear();
  auto committed = rootfs::commit_stacked_version(store, name, std::move(t), tenant_id);
  if (committed) committed->tenant = tenant_id;
  return committed;
}

}  // namespace

void SessionManager::snapshot(const Caller& caller, const std::string& session_id, std::string name,
                              Done<rootfs::Template> done) {
  auto cat = catalog();
  if (auto ok = cat.writable_name(name); !ok) return done(std::unexpected(ok.error()));
  on_reactor([this, caller, session_id, name = std::move(name), done = std::move(done), cat]() mutable {
    auto found = find_live(caller, session_id);
    if (!found) return done(std::unexpected(found.error()));
    std::shared_ptr<Session> s = *found;
    if (!s->instance) return done(fail(ErrorCode::gone, "session " + session_id + " has ended"));
    if (s->snapshotting) return done(fail(ErrorCode::conflict, "a snapshot of session " + session_id + " is running"));
    s->snapshotting = true;
    s->last_activity = Clock::now();
    // A session frozen already (paused) stays as it is; else it is frozen for the copy
    // and thawed after it.
    const bool we_freeze = !s->instance->frozen();
    auto copy = [this, s, store = cat.private_store(caller.tenant_id), name, session_id, tenant = caller.tenant_id,
                 we_freeze, done = std::move(done)](Result<void> frozen) mutable {
      // A pause or resume asked for meanwhile waited in after_freeze (pause.cc): it is
      // decided once the snapshot has let go of the freezer.
      auto thaw_and = [this, s, we_freeze](Done<rootfs::Template> d, Result<rootfs::Template> r) {
        auto finish = [this, s](Done<rootfs::Template>& d, Result<rootfs::Template>& r) {
          s->snapshotting = false;
          boost::json::object data{{"result", r ? "ok" : "failed"}};
          if (r) {
            data["template"] = r->name + "@" + r->version;
            if (!r->layer_meta.empty()) {
              data["layer_digest"] = r->layer_meta.back().digest;
              data["layer_size_bytes"] = r->layer_meta.back().size_bytes;
            }
          } else {
            data["message"] = r.error().message();
          }
          if (!s->ended) observe_change(*s, "session.snapshot", std::move(data));
          d(std::move(r));
          auto waiters = std::move(s->after_freeze);
          s->after_freeze.clear();
          for (auto& w : waiters) w();
        };
        if (!we_freeze || !s->instance || s->ended) return finish(d, r);
        s->instance->freeze(false, [finish, d = std::move(d), r = std::move(r)](Result<void>) mutable { finish(d, r); });
      };
      if (!frozen) return thaw_and(std::move(done), std::unexpected(frozen.error()));
      if (!s->instance || s->ended) return thaw_and(std::move(done), fail(ErrorCode::gone, "session " + session_id + " has ended"));
      auto upper = s->instance->open_writable_layer();
      if (!upper) return thaw_and(std::move(done), std::unexpected(upper.error()));
      rootfs::IdShift shift{s->instance->host_id(0), 65536};
      asio::post(*storage_pool_, [this, s, store, name, parent = s->tmpl,
                                  upper = std::make_shared<UniqueFd>(std::move(*upper)), shift, session_id, tenant,
                                  thaw_and, done = std::move(done)]() mutable {
        auto made = std::make_shared<Result<rootfs::Template>>(
            capture(store, name, parent, std::move(*upper), shift, session_id, tenant));
        on_reactor([made, thaw_and, done = std::move(done)]() mutable { thaw_and(std::move(done), std::move(*made)); });
      });
    };
    if (we_freeze) s->instance->freeze(true, std::move(copy));
    else copy(Result<void>{});
  });
}

Result<void> SessionManager::remove_template_version(const Caller& caller, const std::string& name,
                                                     const std::string& version) {
  auto cat = catalog();
  if (!rootfs::valid_template_name(name) || !rootfs::valid_template_name(version))
    return fail(ErrorCode::invalid_argument, "bad template name or version");
  if (cat.shared_name(name))
    return fail(ErrorCode::permission_denied, "template `" + name + "` is a shared template: it is read-only");
  rootfs::TemplateStore store = cat.private_store(caller.tenant_id);
  std::promise<Result<void>> promise;
  auto f = promise.get_future();
  // The check and the rename that hides the version happen together on the reactor,
  // so no create can load the version between them (creates load on the reactor).
  on_reactor([&] {
    rootfs::Template probe;
    probe.tenant = caller.tenant_id;
    probe.name = name;
    probe.version = version;
    const std::string key = template_key(probe);
    int users = 0;
    if (auto it = booting_templates_.find(key); it != booting_templates_.end()) users += it->second;
    for (auto& [id, s] : sessions_)
      if (!s->ended && template_key(s->tmpl) == key) ++users;
    if (users > 0)
      return promise.set_value(fail(ErrorCode::conflict, "template " + name + "@" + version + " is in use by " +
                                                             std::to_string(users) + " session(s)"));
    promise.set_value(rootfs::remove_version(store, name, version));
  });
  auto removed = f.get();
  if (!removed) return removed;
  if (auto gc = rootfs::collect_layers(store); !gc)
    std::fprintf(stderr, "cela: collecting template layers: %s\n", gc.error().message().c_str());
  return {};
}

}  // namespace cela::session
