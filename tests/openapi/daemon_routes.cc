#include "daemon_routes.h"

#include <stdlib.h>

#include <filesystem>

namespace cela::test_support {

Result<std::unique_ptr<DaemonRoutes>> DaemonRoutes::open() {
  std::unique_ptr<DaemonRoutes> d(new DaemonRoutes());
  std::string tmpl = std::filesystem::temp_directory_path().string() + "/cela-openapi-XXXXXX";
  if (!::mkdtemp(tmpl.data())) return fail(ErrorCode::system, "mkdtemp " + tmpl);
  d->state_dir_ = tmpl;
  session::DaemonConfig config;
  config.state_dir = d->state_dir_;
  config.templates_dir = d->state_dir_ + "/templates";
  auto store = store::Store::open(d->state_dir_ + "/cela.db");
  if (!store) return std::unexpected(store.error());
  d->store_ = std::move(*store);
  auto sessions = session::SessionManager::open(config, *d->store_);
  if (!sessions) return std::unexpected(sessions.error());
  d->sessions_ = std::move(*sessions);
  api::ServerConfig server_config;
  server_config.unix_socket_path = d->socket_path();
  server_config.tcp_host.clear();
  server_config.io_threads = 1;
  server_config.blocking_threads = 1;
  d->server_ = std::make_unique<api::HttpServer>(server_config);
  d->context_ = std::make_unique<api::RouteContext>(
      api::RouteContext{*d->server_, *d->sessions_, ""});
  d->server_->set_authenticator(api::make_authenticator(*d->context_));
  api::add_api_routes(*d->context_);
  d->tokens_ = std::make_unique<api::e2b::SandboxTokens>(std::string(32, 'k'));
  d->e2b_ = std::make_unique<api::e2b::E2bContext>(api::e2b::E2bContext{*d->context_, *d->tokens_});
  api::e2b::add_e2b_routes(*d->e2b_);
  return d;
}

DaemonRoutes::~DaemonRoutes() {
  if (server_) server_->stop();
  e2b_.reset();
  tokens_.reset();
  context_.reset();
  server_.reset();
  sessions_.reset();
  store_.reset();
  std::error_code ec;
  if (!state_dir_.empty()) std::filesystem::remove_all(state_dir_, ec);
}

}  // namespace cela::test_support
