// envd's GET /health: 204 while the sandbox lives, E2B's 502 once it does not (the SDK
// probes it after a stream dropped, to tell a killed sandbox from a network hiccup).
#include "api/e2b/e2b.h"
#include "api/e2b/sandbox_lookup.h"

namespace cela::api::e2b {

void add_envd_health_route(E2bContext& ctx) {
  ctx.api.server.sandbox_router().add(http::verb::get, "/49983/health", RouteDoc{},
                                      [&ctx](Request&, Responder& res) {
                                        with_live_sandbox(ctx, res, [r = res.shared_from_this()] { r->no_content(); });
                                      });
}

}  // namespace cela::api::e2b
