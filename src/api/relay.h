// Relay: a route that takes its request over once the header has passed routing and
// authentication (the port proxy, api/port_proxy.h). It reads the rest of the request
// and writes the whole answer itself, on the connection's strand, then gives the
// connection back: to read the next request (keep-alive), to close, or to answer an
// error it met before it sent anything.
//
// Only streamed routes (RouteOptions::stream_body) relay: their body is still unread
// when the handler runs. The connection's request slot stays held for the whole
// exchange (a relayed WebSocket holds it until it closes).
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "api/http_error.h"

namespace cela::api {

namespace http = boost::beast::http;

// The client side of a relayed request, valid until `done` is called (or abort()).
struct RelayRequest {
  boost::asio::generic::stream_protocol::socket& socket;
  boost::beast::flat_buffer& buffer;  // bytes read past the header
  // The body still to read; null when the request has none.
  http::request_parser<http::buffer_body>* body = nullptr;
  unsigned version = 11;
  bool keep_alive = false;  // the client's wish, and the server not stopping
  bool head = false;
  bool expect_continue = false;  // the client waits for 100 Continue before its body
  std::string request_id;
  // The connection: socket, buffer and parser above live as long as the relay holds
  // this (a relay aborted mid-read still completes its operations on them).
  std::shared_ptr<void> owner;
};

struct RelayEnd {
  int status = 0;      // the status sent to the client (access log); 0 when none was
  bool reuse = false;  // the connection may read its next request
  // Nothing was sent: the connection answers this error instead.
  std::optional<ApiError> error;
};

class Relay {
 public:
  virtual ~Relay() = default;
  // On the connection's strand; `done` is called once, on the strand, unless abort()
  // came first.
  virtual void start(RelayRequest request, std::function<void(RelayEnd)> done) = 0;
  // The connection is closing (the client left, the server stops): end at once, on the
  // strand, without calling `done`.
  virtual void abort() = 0;
};

}  // namespace cela::api
