// Templates (API.md "Templates, snapshots, volumes, pause, pools"): list, versions,
// removal, snapshots of sessions, builds and OCI imports. Reads of the stores and
// removals run on the blocking pool; builds run on the session layer's build thread.
#include <boost/json.hpp>

#include "api/json_body.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"
#include "common/json_fields.h"
#include "session/oci_import.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

json::object render_template(const rootfs::Template& t, bool current) {
  json::array layers;
  for (const auto& m : t.layer_meta)
    layers.push_back(json::object{{"digest", m.digest}, {"size_bytes", m.size_bytes}, {"created_by", m.created_by}});
  json::array env;
  for (const auto& e : t.env) env.emplace_back(e);
  json::object o;
  o["name"] = t.name;
  o["version"] = t.version;
  o["template_ref"] = t.name + "@" + t.version;
  o["current"] = current;
  o["shared"] = t.tenant.empty();
  o["digest"] = t.digest;
  o["built_at"] = t.built_at;
  o["built_by"] = t.built_by;
  o["source"] = t.source;
  o["parent"] = t.parent.empty() ? json::value(nullptr) : json::value(t.parent);
  o["size_bytes"] = t.size_bytes;
  o["layers"] = std::move(layers);
  o["user"] = json::object{{"name", t.user.name}, {"uid", t.user.uid}, {"gid", t.user.gid}, {"home", t.user.home}};
  o["env"] = std::move(env);
  o["workdir"] = t.workdir.empty() ? json::value(nullptr) : json::value(t.workdir);
  o["allow_sudo"] = t.allow_sudo;
  o["dev_only"] = t.dev_only;
  return o;
}

namespace {

ApiResult<json::value> versions_answer(session::SessionManager& mgr, const session::Caller& caller,
                                       const std::string& name) {
  auto versions = mgr.catalog().versions(caller.tenant_id, name);
  if (!versions) return std::unexpected(from_error(versions.error()));
  auto current = mgr.catalog().resolve(caller.tenant_id, name);
  std::string current_version = current ? current->version : "";
  json::array items;
  for (const auto& v : *versions) items.push_back(render_template(v, v.version == current_version));
  json::object out;
  out["name"] = name;
  out["current"] = current_version.empty() ? json::value(nullptr) : json::value(current_version);
  out["shared"] = versions->front().tenant.empty();
  out["versions"] = std::move(items);
  return out;
}

}  // namespace

void add_template_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  auto& mgr = ctx.sessions;

  r.add(verb::get, "/v1/templates", docs::list_templates, [&](Request& req, Responder& res) {
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req)]() -> ApiResult<json::value> {
      auto list = mgr.catalog().list(caller.tenant_id);
      if (!list) return std::unexpected(from_error(list.error()));
      json::array items;
      for (const auto& t : *list) {
        // Dev-only templates exist only for local root on a dev-mode daemon.
        if (t.dev_only && !(mgr.config()->dev_mode && caller.local_root)) continue;
        items.push_back(render_template(t, true));
      }
      return json::object{{"templates", std::move(items)}};
    });
  });

  r.add(verb::get, "/v1/templates/{name}", docs::get_template, [&](Request& req, Responder& res) {
    std::string name(req.param("name"));
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), name]() -> ApiResult<json::value> {
      if (name == rootfs::kHostTemplate && !(mgr.config()->dev_mode && caller.local_root))
        return std::unexpected(ApiError::not_found("template " + name + " not found"));
      return versions_answer(mgr, caller, name);
    });
  });

  r.add(verb::delete_, "/v1/templates/{name}/versions/{version}", docs::delete_template_version,
        [&](Request& req, Responder& res) {
          std::string name(req.param("name")), version(req.param("version"));
          answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), name, version]() -> ApiResult<json::value> {
            if (auto r = mgr.remove_template_version(caller, name, version); !r)
              return std::unexpected(from_error(r.error()));
            return json::object{{"name", name}, {"version", version}, {"deleted", true}};
          });
        });

  r.add(verb::post, "/v1/templates", docs::create_template, [&](Request& req, Responder& res) {
    auto body = parse_json_object(req.body);
    if (!body) return res.error(body.error());
    auto spec = rootfs::parse_build_json(*body, false);
    if (!spec) return res.error(spec.error());
    session::Caller caller = caller_of(req);
    if (spec->name.empty()) return res.error(ApiError::invalid_request("field `name` is required"));
    if (auto ok = mgr.catalog().writable_name(spec->name); !ok) return res.error(from_error(ok.error()));
    session::BuildRequest request{std::move(*spec), caller.tenant_id, mgr.config()->dev_mode && caller.local_root};
    auto job = mgr.builds().start(std::move(request));
    if (!job) return res.error(from_error(job.error()));
    res.json(202, json::object{{"build_id", (*job)->id()}, {"state", "running"}});
  }, upload_options(ctx));

  r.add(verb::get, "/v1/templates/builds/{id}", docs::get_template_build, [&](Request& req, Responder& res) {
    auto follow = req.query_flag("follow");
    if (!follow) return res.error(follow.error());
    auto job = mgr.builds().find(caller_of(req).tenant_id, std::string(req.param("id")));
    if (!job) return res.error(from_error(job.error()));
    if (!*follow) return res.json(200, json::parse((*job)->state_json()));
    long long after = -1;
    if (auto last = last_event_id(req)) {
      try {
        after = std::stoll(std::string(*last));
      } catch (...) {
        return res.error(ApiError::invalid_request("Last-Event-ID must be a line number"));
      }
    }
    auto sse = res.start_sse();
    (*job)->follow(after, [sse](size_t index, const session::BuildJob::Event& e) {
      if (!sse->send(e.type, std::to_string(index), e.data)) return false;
      if (e.type == "done" || e.type == "failed") sse->close();
      return true;
    });
  });

  r.add(verb::post, "/v1/templates/import", docs::import_template, [&](Request& req, Responder& res) {
    auto name = req.query_value("name");
    if (!name) return res.error(ApiError::invalid_request("query `name` is required"));
    std::string n(*name);
    if (auto ok = mgr.catalog().writable_name(n); !ok) return res.error(from_error(ok.error()));
    answer_blocking(ctx, res, 201, [&mgr, caller = caller_of(req), n, body = std::move(req.body)]() -> ApiResult<json::value> {
      auto store = mgr.catalog().private_store(caller.tenant_id);
      auto t = session::import_oci_image(store, n, body, caller.tenant_id);
      if (!t) return std::unexpected(from_error(t.error()));
      t->tenant = caller.tenant_id;
      json::object o = render_template(*t, true);
      o["template"] = t->name + "@" + t->version;
      return o;
    });
  }, upload_options(ctx));

  r.add(verb::post, "/v1/sessions/{id}/snapshot", docs::snapshot_session, [&](Request& req, Responder& res) {
    auto body = req.body.empty() ? Result<json::object>(json::object{}) : parse_json_object(req.body);
    if (!body) return res.error(body.error());
    JsonFields f(*body);
    if (auto ok = f.only({"template"}); !ok) return res.error(ok.error());
    auto name = f.require_string("template");
    if (!name) return res.error(name.error());
    std::string id(req.param("id"));
    mgr.snapshot(caller_of(req), id, *name, [r = res.shared_from_this(), id](Result<rootfs::Template> t) {
      if (!t) return r->error(from_error(t.error()).with_session(id));
      json::object o = render_template(*t, true);
      o["template"] = t->name + "@" + t->version;
      o["layer_digest"] = t->layer_meta.back().digest;
      o["layer_size_bytes"] = t->layer_meta.back().size_bytes;
      o["processes_kept"] = false;
      o["note"] =
          "filesystem state only: the session's processes are not checkpointed (a new session from this "
          "template starts fresh processes); the session was frozen during the copy and runs on";
      r->json(201, o);
    });
  });
}

}  // namespace cela::api
