// Listener (internal to api/): one listening socket (unix or TCP) and its accept loop.
// Accepted sockets go to admit_connection(), each with its own strand.
#pragma once

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>

#include "api/request.h"
#include "common/error.h"
#include "common/fd.h"

namespace cela::api::detail {

struct ServerCore;

// A bound, listening unix socket at `path`. A stale socket file is removed first (one
// that still accepts connections belongs to a running server: EADDRINUSE); any other
// kind of file there is an error. The socket is made mode 0600 before listen(), so it
// never accepts a connection from another user.
Result<UniqueFd> listen_unix_socket(const std::string& path);
// A bound, listening TCP socket; `host` is an IP address literal. `bound_port` gets
// the actual port (useful with port 0).
Result<UniqueFd> listen_tcp_socket(const std::string& host, std::uint16_t port,
                                   std::uint16_t& bound_port, int& family);

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  // Takes ownership of `fd`, a listening socket of `family` (AF_UNIX, AF_INET, AF_INET6).
  Listener(ServerCore& core, UniqueFd fd, int family, Transport transport, std::string label);

  void start();
  void close();  // thread-safe

 private:
  void accept();

  ServerCore& core_;
  boost::asio::basic_socket_acceptor<boost::asio::generic::stream_protocol> acceptor_;
  const Transport transport_;
  const std::string label_;
  boost::asio::steady_timer retry_timer_;
};

}  // namespace cela::api::detail
