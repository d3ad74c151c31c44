// Storage routes (API.md "Templates, snapshots, volumes, pause, pools"): session reset
// and volumes. Volume creation runs mkfs, so it goes to the blocking pool; deletion
// is decided on the session reactor, where creates claim volumes.
#include <boost/json.hpp>

#include "api/json_body.h"
#include "api/render.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

json::value render_volume(const session::VolumeInfo& v) {
  json::array readers;
  for (const auto& r : v.readers) readers.emplace_back(r);
  return json::object{{"name", v.record.name},
                      {"size_mb", v.record.size_mb},
                      {"created_at", v.record.created_at},
                      {"allocated_bytes", v.record.allocated_bytes},
                      {"writer", v.writer.empty() ? json::value(nullptr) : json::value(v.writer)},
                      {"readers", std::move(readers)}};
}

}  // namespace

void add_storage_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  auto& mgr = ctx.sessions;

  r.add(verb::post, "/v1/sessions/{id}/reset", docs::reset_session, [&](Request& req, Responder& res) {
    std::string id(req.param("id"));
    mgr.reset(caller_of(req), id, [r = res.shared_from_this(), id](Result<session::SessionRecord> done) {
      if (!done) return r->error(from_error(done.error()).with_session(id));
      r->json(200, render(*done));
    });
  });

  r.add(verb::post, "/v1/volumes", docs::create_volume, [&](Request& req, Responder& res) {
    auto body = parse_json_object(req.body.empty() ? std::string_view("{}") : std::string_view(req.body));
    if (!body) return res.error(body.error());
    JsonFields f(*body);
    if (auto ok = f.only({"name", "size_mb"}); !ok) return res.error(ok.error());
    auto name = f.require_string("name");
    if (!name) return res.error(name.error());
    auto size = f.require_integer("size_mb");
    if (!size) return res.error(size.error());
    if (*size < 1) return res.error(f.invalid("size_mb", "must be a whole number >= 1"));
    answer_blocking(ctx, res, 201,
                    [&mgr, caller = caller_of(req), name = *name, size = static_cast<uint64_t>(*size)]()
                        -> ApiResult<json::value> {
                      auto v = mgr.create_volume(caller, name, size);
                      if (!v) return std::unexpected(from_error(v.error()));
                      return render_volume(*v);
                    });
  });

  r.add(verb::get, "/v1/volumes", docs::list_volumes, [&](Request& req, Responder& res) {
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req)]() -> ApiResult<json::value> {
      auto list = mgr.list_volumes(caller);
      if (!list) return std::unexpected(from_error(list.error()));
      json::array out;
      for (const auto& v : *list) out.push_back(render_volume(v));
      return json::object{{"volumes", std::move(out)}};
    });
  });

  r.add(verb::get, "/v1/volumes/{name}", docs::get_volume, [&](Request& req, Responder& res) {
    answer_blocking(ctx, res, 200,
                    [&mgr, caller = caller_of(req), name = std::string(req.param("name"))]() -> ApiResult<json::value> {
                      auto v = mgr.get_volume(caller, name);
                      if (!v) return std::unexpected(from_error(v.error()));
                      return render_volume(*v);
                    });
  });

  r.add(verb::delete_, "/v1/volumes/{name}", docs::delete_volume, [&](Request& req, Responder& res) {
    mgr.delete_volume(caller_of(req), std::string(req.param("name")),
                      [r = res.shared_from_this()](Result<session::VolumeInfo> done) {
                        if (!done) return r->error(from_error(done.error()));
                        r->json(200, render_volume(*done));
                      });
  });
}

}  // namespace cela::api
