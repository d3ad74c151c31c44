// ServerCore (internal to api/): the state an HttpServer shares with its listeners and
// connections: configuration, routes, the authenticator, the io_context, the blocking
// pool and the registry of open connections.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "api/connection_slots.h"
#include "api/server.h"

namespace cela::api::detail {

class Connection;

struct ServerCore {
  explicit ServerCore(ServerConfig config);

  void log(std::string_view line) const;

  // The registry holds the only long-lived owning reference to an open connection:
  // handles (Responder, streams) hold weak ones, so clearing the registry at stop()
  // releases every connection while the io_context still exists.
  void add_connection(const std::shared_ptr<Connection>& connection);
  void remove_connection(const Connection* connection);
  std::vector<std::shared_ptr<Connection>> connections();
  void clear_connections();

  ServerConfig config;
  Router router;
  Authenticator authenticator;
  Router sandbox_router;  // requests with E2b-Sandbox-Id (HttpServer::sandbox_router)
  Authenticator sandbox_authenticator;
  std::atomic<bool> stopping{false};  // set once the io threads are stopping: no new posts
  ConnectionSlots slots;  // before ioc: pending handlers own connections, which own leases
  std::atomic<std::size_t> rejecting{0};  // over-limit connections being answered 503
  std::optional<boost::asio::thread_pool> blocking;
  // Keeps the io threads running while no operation is pending.
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>
      work_guard;

 private:
  std::mutex mu_;
  std::unordered_map<const Connection*, std::shared_ptr<Connection>> connections_;

 public:
  // Declared last so that it is destroyed first: destroying it destroys pending
  // handlers, which may own connections; those must still find the members above.
  boost::asio::io_context ioc;
};

}  // namespace cela::api::detail
