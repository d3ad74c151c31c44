#include "api/e2b/e2b.h"

#include "api/e2b/control.h"
#include "api/e2b/envd_files.h"
#include "api/e2b/envd_fs.h"

#include <string>

#include "api/e2b/ports.h"

namespace cela::api::e2b {

void add_e2b_routes(E2bContext& ctx) {
  ctx.api.server.set_sandbox_authenticator(make_sandbox_authenticator(ctx.tokens));
  add_control_routes(ctx);
  add_envd_health_route(ctx);
  add_envd_process_routes(ctx);
  add_port_routes(ctx);
  add_envd_files_routes(ctx);
  add_envd_fs_routes(ctx);
}

Authenticator make_sandbox_authenticator(const SandboxTokens& tokens) {
  return [&tokens](const Request& req) -> std::expected<Principal, ApiError> {
    auto sandbox = req.header("E2b-Sandbox-Id");
    if (!sandbox || sandbox->empty())
      return std::unexpected(ApiError::unauthorized("missing E2b-Sandbox-Id"));
    auto port = req.header("E2b-Sandbox-Port");
    const bool envd = !port || port->empty() || *port == kEnvdPort;
    std::optional<std::string> tenant;
    if (auto token = req.header("X-Access-Token"); token && !token->empty())
      tenant = tokens.verify(TokenKind::envd, *token, *sandbox);
    if (!tenant && !envd) {
      if (auto token = req.header("E2B-Traffic-Access-Token"); token && !token->empty())
        tenant = tokens.verify(TokenKind::traffic, *token, *sandbox);
    }
    if (!tenant)
      return std::unexpected(ApiError::unauthorized("missing or invalid sandbox access token"));
    return Principal{.tenant_id = std::move(*tenant),
                     .admin = false,
                     .key_id = "sandbox:" + std::string(*sandbox),
                     .host_admin = false};
  };
}

}  // namespace cela::api::e2b
