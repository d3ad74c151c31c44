// DaemonRoutes: the daemon's route table without a daemon: a Store and a
// SessionManager on a temporary state directory, an HttpServer that is never started,
// and every route registered by api::add_api_routes and api::e2b::add_e2b_routes,
// exactly as `cela serve` does. For
// the OpenAPI tests (tests/unit/openapi_test.cc, dump_openapi.cc). No session is ever
// created; the state directory is removed on destruction. serve() starts the server on
// a unix socket in that directory only (no TCP), for a test that asks the real
// GET /v1/openapi.json.
#pragma once

#include <memory>
#include <string>

#include "api/e2b/e2b.h"
#include "api/routes.h"
#include "api/server.h"
#include "common/error.h"
#include "session/manager.h"
#include "store/store.h"

namespace cela::test_support {

class DaemonRoutes {
 public:
  static Result<std::unique_ptr<DaemonRoutes>> open();
  ~DaemonRoutes();
  const api::Router& router() { return server_->router(); }
  Result<void> serve() { return server_->start(); }
  std::string socket_path() const { return state_dir_ + "/api.sock"; }

 private:
  DaemonRoutes() = default;
  std::string state_dir_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<session::SessionManager> sessions_;
  std::unique_ptr<api::HttpServer> server_;
  std::unique_ptr<api::RouteContext> context_;
  std::unique_ptr<api::e2b::SandboxTokens> tokens_;
  std::unique_ptr<api::e2b::E2bContext> e2b_;
};

}  // namespace cela::test_support
