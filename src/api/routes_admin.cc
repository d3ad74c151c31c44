// Health, readiness, tenants and keys (admin), and the OpenAPI description.
#include <boost/json.hpp>

#include "api/json_body.h"
#include "api/openapi.h"
#include "api/render.h"
#include "api/responder.h"
#include "api/routes.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

void add_admin_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  RouteOptions open;
  open.public_route = true;
  r.add(verb::get, "/healthz", [](Request&, Responder& res) { res.json(200, json::object{{"status", "ok"}}); }, open);
  r.add(verb::get, "/readyz", [&ctx](Request&, Responder& res) {
    // 503 while no create could be admitted: a load balancer sends new sessions elsewhere.
    bool full = ctx.sessions.full();
    res.json(full ? 503 : 200, json::object{{"status", full ? "full" : "ready"},
                                            {"live_sessions", ctx.sessions.live_sessions()},
                                            {"max_sessions", ctx.sessions.config().max_sessions}},
             full ? Headers{{"Retry-After", "1"}} : Headers{});
  }, open);
  r.add(verb::get, "/v1/openapi.json", [](Request&, Responder& res) { res.json(200, openapi_document()); }, open);

  r.add(verb::post, "/v1/tenants", [&ctx](Request& req, Responder& res) {
    if (!req.principal || !req.principal->admin) return res.error(ApiError::forbidden("an admin key is required"));
    auto body = parse_json_object(req.body);
    if (!body) return res.error(body.error());
    JsonFields f(*body);
    if (auto ok = f.only({"name", "quotas"}); !ok) return res.error(ok.error());
    auto name = f.require_string("name");
    if (!name) return res.error(name.error());
    store::Quotas q{ctx.sessions.config().quotas.max_sessions, ctx.sessions.config().quotas.max_memory_mb,
                    ctx.sessions.config().quotas.max_cpus};
    auto quotas = f.object("quotas");
    if (!quotas) return res.error(quotas.error());
    if (*quotas) {
      if (auto ok = (*quotas)->only({"max_sessions", "max_memory_mb", "max_cpus"}); !ok) return res.error(ok.error());
      auto s = (*quotas)->integer("max_sessions");
      auto m = (*quotas)->integer("max_memory_mb");
      auto c = (*quotas)->number("max_cpus");
      if (!s) return res.error(s.error());
      if (!m) return res.error(m.error());
      if (!c) return res.error(c.error());
      q.max_sessions = s->value_or(q.max_sessions);
      q.max_memory_mb = m->value_or(q.max_memory_mb);
      q.max_cpus = c->value_or(q.max_cpus);
      if (q.max_sessions < 0 || q.max_memory_mb < 0 || q.max_cpus < 0)
        return res.error(ApiError::invalid_request("quotas must not be negative"));
    }
    answer_blocking(ctx, res, 201, [&ctx, name = *name, q]() -> ApiResult<json::value> {
      auto t = ctx.store.create_tenant(name, q);
      if (!t) return std::unexpected(from_error(t.error()));
      return json::value(render(*t));
    });
  });

  r.add(verb::post, "/v1/tenants/{t}/keys", [&ctx](Request& req, Responder& res) {
    if (!req.principal || !req.principal->admin) return res.error(ApiError::forbidden("an admin key is required"));
    json::object body;
    if (!req.body.empty()) {
      auto b = parse_json_object(req.body);
      if (!b) return res.error(b.error());
      body = std::move(*b);
    }
    JsonFields f(body);
    if (auto ok = f.only({"admin"}); !ok) return res.error(ok.error());
    auto admin = f.boolean("admin");
    if (!admin) return res.error(admin.error());
    answer_blocking(ctx, res, 201, [&ctx, t = std::string(req.param("t")), admin = admin->value_or(false)]()
                                       -> ApiResult<json::value> {
      if (auto tenant = ctx.store.get_tenant(t); !tenant) return std::unexpected(ApiError::not_found("no tenant " + t));
      auto key = ctx.store.create_key(t, admin);
      if (!key) return std::unexpected(from_error(key.error()));
      // The only time the key is ever shown: it is stored hashed.
      return json::value(json::object{{"id", key->id}, {"tenant_id", t}, {"key", key->key}, {"admin", admin}});
    });
  });
}

}  // namespace cela::api
