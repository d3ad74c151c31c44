// Egress (API.md "Network (egress)"): GET /v1/sessions/{id}/egress, the records of
// every attempt through the session's door (session/egress.h writes them).
#include <boost/json.hpp>

#include "api/json_body.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"
#include "common/json_fields.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

json::value null_if_empty(const std::string& s) { return s.empty() ? json::value(nullptr) : json::value(s); }

json::object render(const store::EgressRecord& e) {
  return json::object{{"at", e.at},
                      {"kind", e.kind},
                      {"host", e.host},
                      {"ip", null_if_empty(e.ip)},
                      {"port", e.port},
                      {"verdict", e.allowed ? "allowed" : "denied"},
                      {"rule", null_if_empty(e.rule)},
                      {"reason", null_if_empty(e.reason)},
                      {"bytes_up", e.bytes_up},
                      {"bytes_down", e.bytes_down},
                      {"duration_ms", e.duration_ms}};
}

json::value render(const std::optional<store::NetworkCeiling>& c) {
  if (!c) return nullptr;
  json::array allow, deny;
  for (const auto& a : c->allow) allow.emplace_back(a);
  for (const auto& d : c->deny) deny.emplace_back(d);
  return json::object{{"allow", std::move(allow)}, {"deny", std::move(deny)}};
}

}  // namespace

void add_egress_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  auto& mgr = ctx.sessions;
  r.add(verb::get, "/v1/sessions/{id}/egress", docs::session_egress, [&](Request& req, Responder& res) {
    auto page = page_of(req);
    if (!page) return res.error(page.error());
    std::string id(req.param("id"));
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), id, page = *page]() -> ApiResult<json::value> {
      auto got = mgr.egress_records(caller, id, page);
      if (!got) return std::unexpected(from_error(got.error()).with_session(id));
      json::array items;
      for (const auto& e : got->first) items.push_back(render(e));
      return json::object{{"connections", std::move(items)},
                          {"next_cursor", got->second.empty() ? json::value(nullptr) : json::value(got->second)}};
    });
  });

  // A tenant's network ceiling: read by its admins, set only by a host admin (a tenant
  // admin must not raise its own ceiling).
  r.add(verb::get, "/v1/tenants/{t}/network_ceiling", docs::get_network_ceiling, [&](Request& req, Responder& res) {
    std::string t(req.param("t"));
    if (auto ok = require_admin_of(req, t); !ok) return res.error(ok.error());
    answer_blocking(ctx, res, 200, [&mgr, t]() -> ApiResult<json::value> {
      auto c = mgr.network_ceiling(t);
      if (!c) return std::unexpected(from_error(c.error()));
      return json::object{{"network_ceiling", render(*c)}};
    });
  });
  r.add(verb::put, "/v1/tenants/{t}/network_ceiling", docs::set_network_ceiling, [&](Request& req, Responder& res) {
    std::string t(req.param("t"));
    if (auto ok = require_host_admin(req); !ok) return res.error(ok.error());
    auto body = parse_json_object(req.body);
    if (!body) return res.error(body.error());
    JsonFields f(*body);
    if (auto ok = f.only({"allow", "deny"}); !ok) return res.error(ok.error());
    auto allow = f.string_array("allow");
    if (!allow) return res.error(allow.error());
    auto deny = f.string_array("deny");
    if (!deny) return res.error(deny.error());
    store::NetworkCeiling c{allow->value_or(std::vector<std::string>{}), deny->value_or(std::vector<std::string>{})};
    answer_blocking(ctx, res, 200, [&mgr, t, c]() -> ApiResult<json::value> {
      if (auto w = mgr.set_network_ceiling(t, c); !w) return std::unexpected(from_error(w.error()));
      return json::object{{"network_ceiling", render(std::optional(c))}};
    });
  });
  r.add(verb::delete_, "/v1/tenants/{t}/network_ceiling", docs::delete_network_ceiling,
        [&](Request& req, Responder& res) {
          std::string t(req.param("t"));
          if (auto ok = require_host_admin(req); !ok) return res.error(ok.error());
          answer_blocking(ctx, res, 200, [&mgr, t]() -> ApiResult<json::value> {
            if (auto w = mgr.set_network_ceiling(t, std::nullopt); !w) return std::unexpected(from_error(w.error()));
            return json::object{{"network_ceiling", nullptr}};
          });
        });
}

}  // namespace cela::api
