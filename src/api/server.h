// HttpServer: cela's HTTP/1.1 front door (API.md): a unix socket for local root and a
// TCP endpoint for keyed clients, JSON answers, SSE and chunked streams. Generic: it
// knows routes, principals and errors, nothing of sessions.
//
// Threads: `io_threads` run the asio io_context: accepting, parsing, routing, the
// authenticator and the handlers run there and must never block. Blocking work (SQLite,
// jail calls, waiting) goes to post_blocking(), a separate pool; its tasks answer
// through the Responder they captured. Each connection is served on its own strand, so
// one connection's work is never concurrent with itself.
//
// Per request, in this order (api/connection.cc):
//   1. header, within header_timeout of its first byte (a new connection gets
//      header_timeout for its first byte too; a kept-alive one idle_timeout), at most
//      header_limit bytes: else the connection is closed (400 for an oversize header)
//   2. target decoded, route matched: 400 / 404 / 405
//   3. authenticator (unless the route is public): 401/403 as it answers
//   4. body, within body_timeout, at most the route's body limit: 408 / 413 (with
//      Expect: 100-continue honoured only after 1-3 passed, so rejected uploads are never
//      sent)
//   5. handler; an exception becomes 500 `internal` with the request id. A streamed
//      route's handler runs before step 4 and takes the body in bounded chunks through
//      a BodySink (api/body_sink.h); 100 Continue waits for its sink.
// An error answered before the body was read closes the connection after the answer.
// Limits (api/connection_slots.h): `slots.total` open connections, the last
// `slots.root_reserve` of them only for local root on the unix socket; `slots.per_peer`
// per TCP address or unix uid; `slots.per_key` requests in flight per API key. A
// connection past a limit is answered (503 capacity_exceeded for the total, 429
// rate_limited per peer or key) and closed. At the descriptor limit the listeners back
// off and answer waiting clients 503 from a spare descriptor (api/listener.h). Every
// error has the API.md JSON body; none hangs.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "api/connection_slots.h"
#include "api/http_error.h"
#include "api/request.h"
#include "api/responder.h"
#include "api/router.h"
#include "api/websocket.h"
#include "common/error.h"

namespace cela::api {

// One answer, for access logs and metrics: logged when a complete answer has been
// written, or for a stream when its header has.
struct AccessRecord {
  std::string_view request_id;
  std::string_view method;
  std::string_view path;
  std::string_view route;  // the matched route's pattern ("/v1/sessions/{id}"); "" when none matched
  int status = 0;
  std::chrono::milliseconds duration{0};  // header read to answer written
  Transport transport = Transport::tcp;
  std::string_view tenant_id;  // empty when unauthenticated
};

struct ServerConfig {
  std::string unix_socket_path;        // "" = no unix listener; mode 0600
  std::string tcp_host = "127.0.0.1";  // "" = no TCP listener
  std::uint16_t tcp_port = 8080;       // 0 = ephemeral: see HttpServer::tcp_port()
  int io_threads = 2;
  int blocking_threads = 8;
  SlotLimits slots;  // connections per server, per peer, requests per key
  std::chrono::milliseconds header_timeout{10'000};
  std::chrono::milliseconds body_timeout{60'000};   // RouteOptions::body_timeout overrides
  std::chrono::milliseconds idle_timeout{60'000};   // between keep-alive requests
  std::chrono::milliseconds write_timeout{60'000};  // one write stalled this long: closed
  std::chrono::milliseconds sse_keepalive{15'000};  // 0 = no automatic keepalive comments
  std::uint32_t header_limit = 16 * 1024;
  std::size_t body_limit = 1024 * 1024;  // JSON routes; RouteOptions::body_limit overrides
  std::size_t stream_buffer_limit = 8 * 1024 * 1024;  // per SSE / chunked response
  WebSocketConfig websocket;  // upgraded requests (api/websocket.h)
  // Daemon log lines (errors, handler exceptions). Default: stderr.
  std::function<void(std::string_view line)> log;
  // Called on an io thread for every answer; must not block.
  std::function<void(const AccessRecord&)> access_log;
};

// Decides who a request comes from, from its transport, peer credentials and headers
// (the body is not read yet). Runs on an io thread for every non-public route: it must
// be fast (keys cached in memory). Returns the principal, or the error to answer
// (usually ApiError::unauthorized()). Without an authenticator every non-public
// route answers 401.
using Authenticator = std::function<std::expected<Principal, ApiError>(const Request&)>;

// The port E2B's SDK names for envd, its in-sandbox agent (E2b-Sandbox-Port).
inline constexpr std::string_view kEnvdPort = "49983";

namespace detail {
struct ServerCore;
class Listener;
}  // namespace detail

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Routes and the authenticator are set before start(); they are read-only after.
  Router& router();
  void set_authenticator(Authenticator authenticator);
  // The second table, for requests that carry `E2b-Sandbox-Id` (the E2B data plane,
  // api/e2b/): they are matched here, never in router(), against their path prefixed
  // with one segment, the `E2b-Sandbox-Port` header (kEnvdPort when absent): envd's
  // "/49983/process.Process/Start", a sandbox port's "/{port}/{path...}". Unmatched:
  // 404 in the E2B error shape, as are its routes' errors unless a route chose another
  // style (RouteOptions::error_style). Its non-public routes are authenticated by the sandbox
  // authenticator (per-sandbox tokens), never by the API-key one.
  Router& sandbox_router();
  void set_sandbox_authenticator(Authenticator authenticator);

  // Binds the listeners and starts the threads. The unix socket: a stale socket file is
  // removed (one that still accepts connections is an error, as is a non-socket file),
  // then bind, chmod 0600, listen.
  Result<void> start();
  // Closes the listeners and every connection (streams see closed()), waits for running
  // blocking tasks (queued ones are dropped: their responders answer nothing, the
  // connections being closed), joins the threads and removes the unix socket.
  // Idempotent; never from an io thread or a blocking task (it joins them).
  // Handles (Responder, SseStream, ChunkedWriter) may outlive the server;
  // they then do nothing. Using them concurrently with stop() is safe; concurrently
  // with the destructor it is not.
  void stop();

  // Runs `fn` on the blocking pool. An exception is logged. After stop() it is dropped.
  void post_blocking(std::function<void()> fn);

  // The bound TCP port (useful with tcp_port = 0); 0 without a TCP listener.
  std::uint16_t tcp_port() const;
  std::size_t open_connections() const;

 private:
  Result<void> listen_unix();
  Result<void> listen_tcp();

  std::unique_ptr<detail::ServerCore> core_;
  std::vector<std::shared_ptr<detail::Listener>> listeners_;
  std::vector<std::thread> io_threads_;
  std::uint16_t tcp_port_ = 0;
  bool unix_socket_bound_ = false;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace cela::api
