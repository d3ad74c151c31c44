// Health, readiness, tenants and keys (admin), and the OpenAPI description (generated
// from the router's table: openapi.h).
#include <algorithm>
#include <boost/json.hpp>

#include "api/json_body.h"
#include "api/openapi.h"
#include "api/render.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

RouteOptions public_options() {
  RouteOptions o;
  o.public_route = true;
  return o;
}

// POST /v1/tenants body: {name, quotas: {max_sessions, max_memory_mb, max_cpus}};
// quotas not given take the config's defaults.
struct TenantSpec {
  std::string name;
  session::Quotas quotas;
};

Result<TenantSpec> parse_tenant(const json::object& body, session::Quotas defaults) {
  JsonFields f(body);
  if (auto ok = f.only({"name", "quotas"}); !ok) return std::unexpected(ok.error());
  auto name = f.require_string("name");
  if (!name) return std::unexpected(name.error());
  // Names are shown and logged: no control characters (NUL included), bounded.
  if (name->empty() || name->size() > 128 ||
      std::any_of(name->begin(), name->end(), [](unsigned char c) { return c < 0x20 || c == 0x7f; }))
    return std::unexpected(f.invalid("name", "must be 1-128 bytes without control characters"));
  TenantSpec spec{*name, defaults};
  auto quotas = f.object("quotas");
  if (!quotas) return std::unexpected(quotas.error());
  if (!*quotas) return spec;
  if (auto ok = (*quotas)->only({"max_sessions", "max_memory_mb", "max_cpus"}); !ok)
    return std::unexpected(ok.error());
  auto s = (*quotas)->integer("max_sessions");
  if (!s) return std::unexpected(s.error());
  auto m = (*quotas)->integer("max_memory_mb");
  if (!m) return std::unexpected(m.error());
  auto c = (*quotas)->number("max_cpus");
  if (!c) return std::unexpected(c.error());
  session::Quotas& q = spec.quotas;
  q.max_sessions = s->value_or(q.max_sessions);
  q.max_memory_mb = m->value_or(q.max_memory_mb);
  q.max_cpus = c->value_or(q.max_cpus);
  if (q.max_sessions < 0 || q.max_memory_mb < 0 || q.max_cpus < 0)
    return fail(ErrorCode::invalid_argument, "quotas must not be negative");
  return spec;
}

void create_tenant(RouteContext& ctx, Request& req, Responder& res) {
  if (auto ok = require_host_admin(req); !ok) return res.error(ok.error());
  auto body = parse_json_object(req.body);
  if (!body) return res.error(body.error());
  const auto d = ctx.sessions.config()->quotas;  // a copy: a reload may replace the snapshot
  auto spec = parse_tenant(*body, session::Quotas{d.max_sessions, d.max_memory_mb, d.max_cpus});
  if (!spec) return res.error(spec.error());
  answer_blocking(ctx, res, 201, [&ctx, spec = *spec]() -> ApiResult<json::value> {
    auto t = ctx.sessions.tenants().create(spec.name, spec.quotas);
    if (!t) return std::unexpected(from_error(t.error()));
    return json::value(render(*t));
  });
}

void create_key(RouteContext& ctx, Request& req, Responder& res) {
  std::string t(req.param("t"));
  if (auto ok = require_admin_of(req, t); !ok) return res.error(ok.error());
  json::object body;
  if (!req.body.empty()) {
    auto b = parse_json_object(req.body);
    if (!b) return res.error(b.error());
    body = std::move(*b);
  }
  JsonFields f(body);
  if (auto ok = f.only({"admin", "host_admin", "e2b"}); !ok) return res.error(ok.error());
  auto e2b = f.boolean("e2b");
  if (!e2b) return res.error(e2b.error());
  auto form = e2b->value_or(false) ? store::KeyForm::e2b : store::KeyForm::cela;
  auto admin = f.boolean("admin");
  if (!admin) return res.error(admin.error());
  auto host_admin = f.boolean("host_admin");
  if (!host_admin) return res.error(host_admin.error());
  bool host = host_admin->value_or(false);
  if (host && !req.principal->host_admin)
    return res.error(ApiError::forbidden("only a host admin key can issue a host admin key"));
  answer_blocking(ctx, res, 201,
                  [&ctx, t, admin = admin->value_or(false) || host, host, form]() -> ApiResult<json::value> {
                    if (auto tenant = ctx.sessions.tenants().get(t); !tenant)
                      return std::unexpected(ApiError::not_found("no tenant " + t));
                    auto key = ctx.sessions.tenants().create_key(t, admin, host, form);
                    if (!key) return std::unexpected(from_error(key.error()));
                    // The only time the key is ever shown: it is stored hashed.
                    return json::value(json::object{{"id", key->id},
                                                    {"tenant_id", t},
                                                    {"key", key->key},
                                                    {"admin", admin},
                                                    {"host_admin", host}});
                  });
}

void list_tenants(RouteContext& ctx, Request& req, Responder& res) {
  if (auto ok = require_admin(req); !ok) return res.error(ok.error());
  answer_blocking(ctx, res, 200, [&ctx, principal = *req.principal]() -> ApiResult<json::value> {
    auto tenants = ctx.sessions.tenants().list();
    if (!tenants) return std::unexpected(from_error(tenants.error()));
    json::array out;
    for (const auto& t : *tenants)
      if (principal.host_admin || t.id == principal.tenant_id) out.push_back(render(t));
    return json::value(json::object{{"tenants", std::move(out)}});
  });
}

void get_tenant(RouteContext& ctx, Request& req, Responder& res) {
  std::string t(req.param("t"));
  if (auto ok = require_admin_of(req, t); !ok) return res.error(ok.error());
  answer_blocking(ctx, res, 200, [&ctx, t]() -> ApiResult<json::value> {
    auto tenant = ctx.sessions.tenants().get(t);
    if (!tenant) return std::unexpected(from_error(tenant.error()));
    return json::value(render(*tenant));
  });
}

}  // namespace

void add_admin_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  r.add(
      verb::get, "/healthz", docs::healthz,
      [](Request&, Responder& res) {
        res.json(200, json::object{{"status", "ok"}});
      },
      public_options());
  r.add(
      verb::get, "/readyz", docs::readyz,
      [&ctx](Request&, Responder& res) {
        // 503 while no create could be admitted: a load balancer sends new sessions elsewhere.
        bool full = ctx.sessions.full();
        res.json(full ? 503 : 200,
                 json::object{{"status", full ? "full" : "ready"},
                              {"live_sessions", ctx.sessions.live_sessions()},
                              {"max_sessions", ctx.sessions.config()->max_sessions}},
                 full ? Headers{{"Retry-After", "1"}} : Headers{});
      },
      public_options());
  // The table is complete once the daemon starts serving, so the answer lists every route.
  r.add(
      verb::get, "/v1/openapi.json", docs::openapi,
      [&ctx](Request&, Responder& res) { res.json(200, openapi_document(ctx.server.router())); },
      public_options());
  r.add(verb::post, "/v1/tenants", docs::create_tenant,
        [&ctx](Request& req, Responder& res) { create_tenant(ctx, req, res); });
  r.add(verb::get, "/v1/tenants", docs::list_tenants,
        [&ctx](Request& req, Responder& res) { list_tenants(ctx, req, res); });
  r.add(verb::get, "/v1/tenants/{t}", docs::get_tenant,
        [&ctx](Request& req, Responder& res) { get_tenant(ctx, req, res); });
  r.add(verb::post, "/v1/tenants/{t}/keys", docs::create_key,
        [&ctx](Request& req, Responder& res) { create_key(ctx, req, res); });
}

}  // namespace cela::api
