// The port proxy (ANY /v1/sessions/{id}/ports/{port}/{path...}): one HTTP exchange, or
// one WebSocket, relayed between a client of the daemon and 127.0.0.1:port inside the
// session's network namespace.
//
// The socket comes from the session's init (session/processes.cc open_port): created in
// the session's namespace and connected from here, so the sandbox gains no network and
// its loopback is reached as if from inside. Beast parses both sides: the request line
// is rewritten to the path after /ports/{port}, hop-by-hop fields are dropped both ways,
// the client's Authorization never enters the sandbox, Host is 127.0.0.1:port. Bodies
// stream in chunks of kRelayChunkBytes, each written before the next is read, so the
// daemon holds two chunks per exchange whatever the size. A `101 Switching Protocols`
// to an upgrade request turns the exchange into raw bytes both ways until either side
// ends. Each upstream connection carries one exchange (Connection: close inside); the
// client's connection stays alive when both framings allow it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "api/relay.h"
#include "common/fd.h"

namespace cela::api {

inline constexpr std::size_t kRelayChunkBytes = 64 * 1024;

struct PortRelayOptions {
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds idle_timeout{120000};  // no byte either way
};

// What the client asked for, as the route handler saw it.
struct ProxiedRequest {
  std::string method;   // as sent
  std::string target;   // inside: path after /ports/{port} and the query
  http::fields headers;
  uint16_t port = 0;
  std::string prefix;   // "/v1/sessions/<id>/ports/<port>" (X-Forwarded-Prefix)
  std::string session_id;  // named in the errors the relay answers
};

// The request-target to send inside for the raw target of a proxied request: what
// follows the first `skip` path segments ("/" when nothing does), and the query as
// sent. invalid_request for a target with fewer segments.
ApiResult<std::string> proxied_target(std::string_view raw_target, std::size_t skip);

// The client's fields as they go inside: hop-by-hop fields dropped (Connection and the
// fields it names, Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding,
// Upgrade, Proxy-Authorization), and Authorization, Host, Expect and Content-Length
// (the proxy frames the body itself); Host set to 127.0.0.1:port, X-Forwarded-Host and
// X-Forwarded-Prefix added. With `websocket`, Connection: Upgrade and Upgrade: websocket.
http::fields upstream_request_fields(const http::fields& client, uint16_t port, std::string_view prefix,
                                     bool websocket);
// The server's fields as they go to the client: hop-by-hop fields dropped, and
// Content-Length (the proxy frames the body itself).
http::fields client_response_fields(const http::fields& server);
// An upgrade request for a WebSocket (Upgrade: websocket, Connection naming upgrade).
bool is_websocket_upgrade(const http::fields& fields);

// Made by the route once the session gave a socket; started by the connection.
std::shared_ptr<Relay> make_port_relay(UniqueFd socket, std::shared_ptr<void> lease, ProxiedRequest request,
                                       PortRelayOptions options);

}  // namespace cela::api
