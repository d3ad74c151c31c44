// The seam between the egress proxy and the services the proxy answers itself (the
// package gateway first). A sandbox reaches both through the same door: its
// 127.0.0.1:3128 relay, a per-session unix socket of the proxy. A plain-HTTP request
// whose host is a reserved internal name (never resolved, never dialled) is handed to
// the service registered for that name instead of being forwarded upstream.
//
// Threads: handle() runs on the proxy's I/O thread and must not block (no upstream
// fetch, no disk read of unbounded size inline). It calls `reply` exactly once, from any
// thread; the proxy writes the answer on the connection's own executor.
#pragma once

#include <boost/beast/http/message_generator.hpp>
#include <boost/beast/http/string_body.hpp>
#include <functional>
#include <string>

namespace cela::net {

// Who is asking: the session whose door the request came through.
struct DoorPeer {
  std::string session_id;
  std::string tenant_id;
};

using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;
using Reply = std::function<void(boost::beast::http::message_generator)>;

class InternalService {
 public:
  virtual ~InternalService() = default;
  // The reserved host this service answers for, e.g. "packages.cela.internal".
  virtual std::string host() const = 0;
  virtual void handle(const DoorPeer& peer, HttpRequest request, Reply reply) = 0;
};

}  // namespace cela::net
