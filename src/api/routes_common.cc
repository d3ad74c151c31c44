// Helpers shared by the route files (routes.h), and add_api_routes: every resource's
// routes registered in one place.
#include <boost/json.hpp>
#include <charconv>

#include "api/responder.h"
#include "api/routes.h"
#include "obs/audit.h"
#include "obs/catalog.h"

#include <chrono>
#include <mutex>

namespace cela::api {

void add_api_routes(RouteContext& ctx) {
  add_admin_routes(ctx);
  add_session_routes(ctx);
  add_file_routes(ctx);
  add_pool_routes(ctx);
  add_observe_routes(ctx);
  add_egress_routes(ctx);
  add_secret_routes(ctx);
  add_storage_routes(ctx);
  add_template_routes(ctx);
  add_process_routes(ctx);
  add_ws_routes(ctx);
}

ApiResult<void> require_admin(const Request& req) {
  if (!req.principal || !req.principal->admin)
    return api_fail(ApiError::forbidden("an admin key is required"));
  return {};
}

ApiResult<void> require_host_admin(const Request& req) {
  if (auto ok = require_admin(req); !ok) return ok;
  if (!req.principal->host_admin) return api_fail(ApiError::forbidden("a host admin key is required"));
  return {};
}

ApiResult<void> require_admin_of(const Request& req, std::string_view tenant_id) {
  if (auto ok = require_admin(req); !ok) return ok;
  if (req.principal->host_admin || req.principal->tenant_id == tenant_id) return {};
  return api_fail(ApiError::not_found("no tenant " + std::string(tenant_id)));
}

ApiResult<store::PageRequest> page_of(const Request& req) {
  store::PageRequest page;
  if (auto l = req.query_value("limit")) {
    auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), page.limit);
    if (ec != std::errc() || p != l->data() + l->size() || page.limit < 1 || page.limit > 1000)
      return api_fail(ApiError::invalid_request("query `limit` must be 1..1000"));
  }
  if (auto c = req.query_value("cursor")) page.cursor = std::string(*c);
  return page;
}

RouteOptions upload_options(const RouteContext& ctx) {
  RouteOptions o;
  o.body_limit = ctx.sessions.config()->max_upload_bytes;
  o.body_timeout = std::chrono::minutes(10);
  return o;
}

session::Caller caller_of(const Request& request) {
  session::Caller c;
  if (request.principal) {
    c.tenant_id = request.principal->tenant_id;
    c.admin = request.principal->admin;
    // The authenticator admits unix-socket callers without a key only for uid 0.
    c.local_root = request.transport == Transport::unix_socket && request.principal->key_id.empty();
  }
  return c;
}

void answer_blocking(RouteContext& ctx, Responder& res, int status,
                     std::function<ApiResult<boost::json::value>()> work) {
  ctx.server.post_blocking([responder = res.shared_from_this(), status, work = std::move(work)] {
    ApiResult<boost::json::value> result = work();
    if (result) responder->json(status, *result);
    else responder->error(result.error());
  });
}

namespace {

// Every refused key is counted; at most kAuthAuditPerSecond of them per second are
// recorded in the audit (a flood of bad keys must not fill the state dir); the next
// record says how many were not.
constexpr int kAuthAuditPerSecond = 20;

void auth_failed(const Request& request, std::string_view why) {
  obs::catalog::auth_failures().add({request.transport == Transport::unix_socket ? "unix" : "tcp"});
  static std::mutex mu;
  static int64_t window = 0;
  static int in_window = 0;
  static uint64_t suppressed = 0;
  uint64_t dropped = 0;
  {
    std::lock_guard lock(mu);
    int64_t now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
    if (now != window) window = now, in_window = 0;
    if (++in_window > kAuthAuditPerSecond) {
      ++suppressed;
      return;
    }
    dropped = std::exchange(suppressed, 0);
  }
  obs::audit("auth.failure", {},
             {{"reason", why},
              {"transport", request.transport == Transport::unix_socket ? "unix" : "tcp"},
              {"remote", request.remote_address},
              {"method", request.method_name},
              {"path", request.path},
              {"request_id", request.request_id},
              {"not_recorded_before", dropped}});
}

}  // namespace

Authenticator make_authenticator(RouteContext& ctx) {
  return [&ctx](const Request& request) -> std::expected<Principal, ApiError> {
    if (request.transport == Transport::unix_socket) {
      // The socket is mode 0600 and root-owned; still, only uid 0 acts as local root.
      if (request.peer && request.peer->uid == 0) return Principal{ctx.default_tenant_id, true, "", true};
      auth_failed(request, "a non-root peer on the local socket without a key");
      return std::unexpected(ApiError::unauthorized("only root may use the local socket without a key"));
    }
    // E2B's SDKs send the same key as X-API-KEY (docs/e2b.md): the same lookup.
    auto token = bearer_token(request);
    if (!token) token = api_key_header(request);
    if (!token) {
      auth_failed(request, "no key");
      return std::unexpected(ApiError::unauthorized());
    }
    auto key = ctx.sessions.tenants().authenticate(*token);
    if (!key) return std::unexpected(ApiError::internal(key.error().message()));
    if (!*key) {
      auth_failed(request, "unknown or revoked key");
      return std::unexpected(ApiError::unauthorized());
    }
    return Principal{(*key)->tenant_id, (*key)->admin || (*key)->host_admin, (*key)->id, (*key)->host_admin};
  };
}

}  // namespace cela::api
