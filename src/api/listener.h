// Listener (internal to api/): one listening socket (unix or TCP) and its accept loop.
// Accepted sockets go to admit_connection(), each with its own strand.
//
// Out of descriptors (EMFILE, ENFILE) the pending connection stays queued, so retrying
// at once would spin: the loop backs off on a timer (10 ms doubling to 1 s) and resumes
// by itself. Each round it first answers the waiting clients 503 capacity_exceeded
// through a spare descriptor held for that purpose (closed, used for one accept and
// answer at a time, reopened), so a client at the limit gets an answer, not a hang.
// The log says so once when such an episode starts and once when it ends.
#pragma once

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
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
  void on_accept_failed(const boost::system::error_code& ec);
  void shed_with_spare();

  ServerCore& core_;
  boost::asio::basic_socket_acceptor<boost::asio::generic::stream_protocol> acceptor_;
  const Transport transport_;
  const std::string label_;
  boost::asio::steady_timer retry_timer_;
  std::chrono::milliseconds backoff_{0};  // 0: not backing off
  std::uint64_t shed_ = 0;                // connections answered 503 in this episode
  UniqueFd spare_;                        // /dev/null, given up to answer at the fd limit
};

}  // namespace cela::api::detail
