// api/e2b/: E2B's wire protocol (docs/e2b.md), a translation onto the session layer so
// that the official E2B SDKs drive cela unchanged. Nothing here runs a sandbox of its
// own: every call becomes a session-layer call made as the caller's tenant, exactly as
// the native routes of api/routes_*.cc make it.
//
//   control plane  /sandboxes, /v2/sandboxes...   main router, X-API-KEY, ErrorStyle::e2b
//   data plane     requests with E2b-Sandbox-Id   HttpServer::sandbox_router():
//                  envd (port 49983): Connect RPCs process.Process, filesystem.Filesystem,
//                  /files, /health; other ports: the session's port proxy
//                  authenticated by per-sandbox tokens (tokens.h)
//
// Threads: as every route file: handlers run on io threads and never block; blocking
// work goes through HttpServer::post_blocking.
#pragma once

#include "api/e2b/tokens.h"
#include "api/routes.h"

namespace cela::api::e2b {

struct E2bContext {
  RouteContext& api;
  const SandboxTokens& tokens;
};

// Every E2B route, control and data plane, and the sandbox authenticator.
void add_e2b_routes(E2bContext& ctx);
// envd's GET /health (envd_health.cc) and process.Process (envd_process.cc).
void add_envd_health_route(E2bContext& ctx);
void add_envd_process_routes(E2bContext& ctx);

// The data plane's authenticator: `E2b-Sandbox-Id` names the sandbox (a cela session
// id); envd (port 49983) wants that sandbox's envd token in X-Access-Token, its other
// ports accept that or its traffic token (E2B-Traffic-Access-Token). The principal is
// the token's tenant with no admin rights and key id "sandbox:<id>" (so the per-key
// request limit applies per sandbox). Anything else: 401.
Authenticator make_sandbox_authenticator(const SandboxTokens& tokens);

}  // namespace cela::api::e2b
