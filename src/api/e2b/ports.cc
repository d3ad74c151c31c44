// E2B's data plane to a sandbox's other ports (docs/e2b.md "Code interpreter"): a
// request with `E2b-Sandbox-Port: P` (P other than envd's 49983) goes to 127.0.0.1:P
// inside the session through cela's port proxy, exactly as
// ANY /v1/sessions/{id}/ports/{P}/... does for the session's tenant (the same relay,
// streaming, connection cap and refusals). The sandbox authenticator has checked the
// envd or traffic token of that sandbox; an unknown or ended sandbox, like a port
// nothing listens on, is E2B's 502.
#include "api/e2b/e2b.h"
#include "api/e2b/ports.h"
#include "api/responder.h"

namespace cela::api::e2b {
using http::verb;

void add_port_routes(E2bContext& ctx) {
  Router& r = ctx.api.server.sandbox_router();
  RouteContext& api = ctx.api;
  auto proxy = [&api](Request& req, Responder& res) {
    std::string port(req.param("port"));
    if (port == kEnvdPort)  // envd's own routes matched first: anything else is no route
      return res.error(ApiError::not_found("no envd route " + std::string(req.method_name) + " " + req.target));
    auto id = req.header("E2b-Sandbox-Id");
    std::string sandbox = id ? std::string(*id) : std::string();
    // The path inside is the request's own: the port came in a header.
    proxy_to_port(api, req, res, PortTarget{sandbox, port, 0, "", true});
  };
  for (verb v : {verb::get, verb::head, verb::post, verb::put, verb::patch, verb::delete_, verb::options})
    r.add(v, "/{port}/{path...}", RouteDoc{.operation_id = "e2bPortProxy" + std::string(http::to_string(v)),
                                            .tag = "e2b",
                                            .summary = "a sandbox's port (E2B data plane)"},
          proxy, RouteOptions().stream_body().with_body_limit(std::numeric_limits<std::size_t>::max()));
}

}  // namespace cela::api::e2b
