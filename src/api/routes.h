// The v1 routes of API.md, wired to the session layer: one function per resource
// file (routes_sessions.cc: sessions and execs; routes_files.cc: files;
// routes_admin.cc: health, tenants, keys, OpenAPI). Handlers parse and validate on
// the I/O thread, then run anything that may block (SQLite, jails, files) through
// HttpServer::post_blocking and answer from there.
#pragma once

#include "api/server.h"
#include "session/manager.h"

namespace cela::api {

struct RouteContext {
  HttpServer& server;
  session::SessionManager& sessions;
  std::string default_tenant_id;  // the tenant of local (unix socket, uid 0) callers
};

void add_session_routes(RouteContext& ctx);
void add_file_routes(RouteContext& ctx);
void add_admin_routes(RouteContext& ctx);
void add_pool_routes(RouteContext& ctx);  // routes_pools.cc
void add_observe_routes(RouteContext& ctx);  // routes_observe.cc: metrics, events, audit
void add_egress_routes(RouteContext& ctx);
void add_secret_routes(RouteContext& ctx);  // routes_secrets.cc
void add_storage_routes(RouteContext& ctx);  // routes_storage.cc: volumes, reset
void add_template_routes(RouteContext& ctx);  // routes_templates.cc
void add_process_routes(RouteContext& ctx);   // routes_processes.cc: processes, port proxy
void add_ws_routes(RouteContext& ctx);  // routes_ws.cc: GET /v1/sessions/{id}/ws
// All of the above, in the daemon's order: the one table served and described by
// GET /v1/openapi.json (cela serve, the OpenAPI tests).
void add_api_routes(RouteContext& ctx);

// Authenticates per API.md: unix-socket peers with uid 0 act as the default tenant
// with host admin rights; TCP callers need `Authorization: Bearer <key>`.
Authenticator make_authenticator(RouteContext& ctx);

// Helpers shared by the route files.
session::Caller caller_of(const Request& request);
// The port proxy (routes_processes.cc), for cela's route and E2B's data plane: relays
// the request to `port` inside the session as the caller; the path inside is the
// request's after its first `skip` segments; `prefix` goes in X-Forwarded-Prefix.
// gone_is_bad_gateway: an unknown or ended session is 502 (E2B), not 404/410.
struct PortTarget {
  std::string session_id;
  std::string port;  // as given (checked: 1..65535)
  std::size_t skip = 0;
  std::string prefix;
  bool gone_is_bad_gateway = false;
};
void proxy_to_port(RouteContext& ctx, Request& req, Responder& res, const PortTarget& to);
// Runs `work` on the blocking pool; its ApiResult becomes the JSON answer (`status`
// on success) or the error object.
void answer_blocking(RouteContext& ctx, Responder& res, int status,
                     std::function<ApiResult<boost::json::value>()> work);
// Admin checks: an admin key; a host admin key; tenant `t` is managed by a host admin
// or by an admin key of that same tenant (to a tenant admin another tenant does not
// exist: not_found, as for every other resource).
ApiResult<void> require_admin(const Request& req);
ApiResult<void> require_host_admin(const Request& req);
ApiResult<void> require_admin_of(const Request& req, std::string_view tenant_id);
// `?limit=` (1..1000, default 100) and `?cursor=` of a paged list.
ApiResult<store::PageRequest> page_of(const Request& request);
// Routes that take raw uploads (files, archives, stdin): the larger body limit.
RouteOptions upload_options(const RouteContext& ctx);

}  // namespace cela::api
