// Egress (API.md "Network (egress)"): GET /v1/sessions/{id}/egress, the records of
// every attempt through the session's door (session/egress.h writes them).
#include <boost/json.hpp>
#include <charconv>

#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"

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

}  // namespace

void add_egress_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  auto& mgr = ctx.sessions;
  r.add(verb::get, "/v1/sessions/{id}/egress", docs::session_egress, [&](Request& req, Responder& res) {
    store::PageRequest page;
    if (auto l = req.query_value("limit")) {
      auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), page.limit);
      if (ec != std::errc() || p != l->data() + l->size() || page.limit < 1 || page.limit > 1000)
        return res.error(ApiError::invalid_request("query `limit` must be 1..1000"));
    }
    if (auto c = req.query_value("cursor")) page.cursor = std::string(*c);
    std::string id(req.param("id"));
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), id, page]() -> ApiResult<json::value> {
      auto got = mgr.egress_records(caller, id, page);
      if (!got) return std::unexpected(from_error(got.error()).with_session(id));
      json::array items;
      for (const auto& e : got->first) items.push_back(render(e));
      return json::object{{"connections", std::move(items)},
                          {"next_cursor", got->second.empty() ? json::value(nullptr) : json::value(got->second)}};
    });
  });
}

}  // namespace cela::api
