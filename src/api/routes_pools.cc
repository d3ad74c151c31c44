// Warm pools (API.md "Templates, snapshots, volumes, pause, pools"): GET /v1/pools, the
// state of every pool the config declares. Host-wide numbers: host admins only (local
// root on the unix socket is one).
#include <boost/json.hpp>
#include <cmath>

#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

json::value ms_or_null(const std::optional<double>& ms) {
  if (!ms) return nullptr;
  return std::round(*ms * 1000) / 1000;  // µs resolution
}

json::object render(const session::PoolStatus& p) {
  json::object limits{{"cpus", p.config.cpus},
                      {"memory_mb", p.config.memory_mb},
                      {"disk_mb", p.config.disk_mb},
                      {"pids", p.config.pids}};
  json::object o{{"template", p.config.template_name},
                 {"size", p.config.size},
                 {"limits", std::move(limits)},
                 {"ready", p.ready},
                 {"booting", p.booting},
                 {"hits", p.hits},
                 {"misses", p.misses},
                 {"refill_ms_last", ms_or_null(p.refill_ms_last)},
                 {"refill_ms_p50", ms_or_null(p.refill_ms_p50)},
                 {"claim_ms_p50", ms_or_null(p.claim_ms_p50)}};
  o["last_error"] = p.last_error.empty() ? json::value(nullptr) : json::value(p.last_error);
  return o;
}

}  // namespace

void add_pool_routes(RouteContext& ctx) {
  ctx.server.router().add(verb::get, "/v1/pools", docs::list_pools, [&ctx](Request& req, Responder& res) {
    if (!req.principal || !req.principal->host_admin)
      return res.error(ApiError::forbidden("a host admin key is required"));
    ctx.sessions.pool_status([r = res.shared_from_this()](Result<std::vector<session::PoolStatus>> pools) {
      if (!pools) return r->error(from_error(pools.error()));
      json::array out;
      for (const auto& p : *pools) out.push_back(render(p));
      r->json(200, json::object{{"pools", std::move(out)}});
    });
  });
}

}  // namespace cela::api
