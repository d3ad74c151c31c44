#include "api/server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <cstdio>

#include "api/connection.h"
#include "api/listener.h"
#include "api/server_core.h"

namespace cela::api {
namespace asio = boost::asio;

namespace detail {

ServerCore::ServerCore(ServerConfig cfg) : config(std::move(cfg)), slots(config.slots) {}

void ServerCore::log(std::string_view line) const {
  if (config.log) {
    config.log(line);
    return;
  }
  std::fprintf(stderr, "cela api: %.*s\n", static_cast<int>(line.size()), line.data());
}

void ServerCore::add_connection(const std::shared_ptr<Connection>& connection) {
  std::lock_guard lock(mu_);
  connections_.emplace(connection.get(), connection);
}

void ServerCore::remove_connection(const Connection* connection) {
  std::shared_ptr<Connection> last;  // released outside the lock
  std::lock_guard lock(mu_);
  auto it = connections_.find(connection);
  if (it == connections_.end()) return;
  last = std::move(it->second);
  connections_.erase(it);
}

std::vector<std::shared_ptr<Connection>> ServerCore::connections() {
  std::lock_guard lock(mu_);
  std::vector<std::shared_ptr<Connection>> out;
  out.reserve(connections_.size());
  for (const auto& [key, connection] : connections_) out.push_back(connection);
  return out;
}

void ServerCore::clear_connections() {
  std::unordered_map<const Connection*, std::shared_ptr<Connection>> doomed;
  {
    std::lock_guard lock(mu_);
    doomed.swap(connections_);
  }
}

}  // namespace detail

namespace {

void run_io(detail::ServerCore* core) {
  // A handler that lets an exception escape must not end the io thread.
  while (true) {
    try {
      core->ioc.run();
      return;
    } catch (const std::exception& e) {
      core->log(std::string("io thread: uncaught exception: ") + e.what());
    } catch (...) {
      core->log("io thread: uncaught exception");
    }
  }
}

}  // namespace

HttpServer::HttpServer(ServerConfig config)
    : core_(std::make_unique<detail::ServerCore>(std::move(config))) {}

HttpServer::~HttpServer() {
  stop();
}

Router& HttpServer::router() {
  return core_->router;
}

void HttpServer::set_authenticator(Authenticator authenticator) {
  core_->authenticator = std::move(authenticator);
}

Router& HttpServer::sandbox_router() {
  return core_->sandbox_router;
}

void HttpServer::set_sandbox_authenticator(Authenticator authenticator) {
  core_->sandbox_authenticator = std::move(authenticator);
}

Result<void> HttpServer::listen_unix() {
  const std::string& path = core_->config.unix_socket_path;
  auto fd = detail::listen_unix_socket(path);
  if (!fd) return std::unexpected(fd.error());
  unix_socket_bound_ = true;
  listeners_.push_back(std::make_shared<detail::Listener>(*core_, std::move(*fd), AF_UNIX,
                                                          Transport::unix_socket, path));
  return {};
}

Result<void> HttpServer::listen_tcp() {
  const ServerConfig& config = core_->config;
  int family = AF_INET;
  auto fd = detail::listen_tcp_socket(config.tcp_host, config.tcp_port, tcp_port_, family);
  if (!fd) return std::unexpected(fd.error());
  listeners_.push_back(
      std::make_shared<detail::Listener>(*core_, std::move(*fd), family, Transport::tcp,
                                         config.tcp_host + ":" + std::to_string(tcp_port_)));
  return {};
}

Result<void> HttpServer::start() {
  if (started_) return fail(ErrorCode::invalid_argument, "HTTP server started twice");
  started_ = true;
  const ServerConfig& config = core_->config;
  if (config.unix_socket_path.empty() && config.tcp_host.empty()) {
    return fail(ErrorCode::invalid_argument, "HTTP server has no listener configured");
  }
  if (config.io_threads < 1 || config.blocking_threads < 1 || config.slots.total < 1) {
    return fail(ErrorCode::invalid_argument,
                "HTTP server needs at least one io thread, blocking thread and connection");
  }
  if (config.slots.root_reserve >= config.slots.total || config.slots.per_peer < 1 ||
      config.slots.per_key < 1) {
    return fail(ErrorCode::invalid_argument,
                "HTTP server: root_reserve must be below total, per_peer and per_key at least 1");
  }
  if (!config.unix_socket_path.empty()) {
    if (auto ok = listen_unix(); !ok) {
      stop();
      return ok;
    }
  }
  if (!config.tcp_host.empty()) {
    if (auto ok = listen_tcp(); !ok) {
      stop();
      return ok;
    }
  }
  core_->blocking.emplace(static_cast<std::size_t>(config.blocking_threads));
  core_->work_guard.emplace(core_->ioc.get_executor());
  for (auto& listener : listeners_) listener->start();
  for (int i = 0; i < config.io_threads; ++i) io_threads_.emplace_back(run_io, core_.get());
  return {};
}

void HttpServer::stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  // 1. No new connections; close the open ones (streams see closed(), blocked
  //    ChunkedWriter::write calls return) while the io threads still run.
  for (auto& listener : listeners_) listener->close();
  for (auto& connection : core_->connections()) connection->close();
  // 2. Running blocking tasks finish (their answers go nowhere); queued ones are dropped.
  if (core_->blocking) {
    core_->blocking->stop();
    core_->blocking->join();
  }
  // 3. The io threads end; from here on nothing posts to the io_context.
  core_->stopping = true;
  core_->work_guard.reset();
  core_->ioc.stop();
  for (auto& thread : io_threads_) thread.join();
  io_threads_.clear();
  // 4. Connections are destroyed while the io_context still exists.
  core_->clear_connections();
  listeners_.clear();
  if (unix_socket_bound_) unlink(core_->config.unix_socket_path.c_str());
}

void HttpServer::post_blocking(std::function<void()> fn) {
  if (!core_->blocking || core_->stopping.load()) return;
  asio::post(*core_->blocking, [core = core_.get(), fn = std::move(fn)] {
    try {
      fn();
    } catch (const std::exception& e) {
      core->log(std::string("blocking task threw: ") + e.what());
    } catch (...) {
      core->log("blocking task threw");
    }
  });
}

std::uint16_t HttpServer::tcp_port() const {
  return tcp_port_;
}

std::size_t HttpServer::open_connections() const {
  return core_->slots.open_connections();
}

}  // namespace cela::api
