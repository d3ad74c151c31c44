// WebSocket: a request upgraded to a WebSocket (RFC 6455, Boost.Beast) that a route
// speaks its own protocol over, in text messages. Generic, like the rest of the HTTP
// server: it knows messages, not sessions.
//
//   r.add(verb::get, "/v1/x/ws", doc, [](Request& req, Responder& res) {
//     res.upgrade_websocket(std::make_shared<MyHandler>(...));
//   });
//
// The connection keeps its slot and the key's request slot for as long as the socket
// is open (a WebSocket is a long-lived request, as an SSE stream is).
//
// Rules of the socket (ServerConfig::websocket):
//   - text messages only: a binary message closes with 1008 (policy violation); a
//     message over max_message bytes closes with 1009 (too big).
//   - the server pings after ping_interval without input and closes the connection
//     when another ping_interval passes without any (a peer that stopped answering).
//   - outgoing messages wait in a queue of at most max_queued bytes (those being
//     written included). A send() that would pass it disconnects the client at once
//     (it does not read): memory stays bounded whatever the producer does.
//
// Threads: the handler's callbacks run on the connection's strand, one at a time, in
// order: on_open, on_text..., on_close (once). A WebSocket handle is thread-safe: a
// producer on any thread may send(); post() runs work on the strand.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace cela::api {

namespace detail {
class WsSession;
}

struct WebSocketConfig {
  std::size_t max_message = 1024 * 1024;      // largest client message
  std::size_t max_queued = 8 * 1024 * 1024;   // outgoing bytes waiting for the client
  std::chrono::milliseconds ping_interval{15'000};
  std::chrono::milliseconds handshake_timeout{10'000};
};

// Close codes the server uses (RFC 6455 section 7.4.1).
namespace ws_close {
inline constexpr std::uint16_t normal = 1000;
inline constexpr std::uint16_t going_away = 1001;
inline constexpr std::uint16_t policy = 1008;
inline constexpr std::uint16_t too_big = 1009;
inline constexpr std::uint16_t internal = 1011;
}  // namespace ws_close

class WebSocket {
 public:
  explicit WebSocket(std::weak_ptr<detail::WsSession> session);

  // Queues one text message. False when the socket is closed, or closes now because
  // the queue would pass max_queued (the client is disconnected).
  bool send(std::string text);
  // Sends what is queued, then a close frame with `code`.
  void close(std::uint16_t code, std::string reason = {});
  bool closed() const;
  // Runs `fn` on the strand (dropped when the socket is gone).
  void post(std::function<void()> fn);
  // True on the socket's strand: where the handler's own state lives.
  bool on_strand() const;
  // Runs `fn` once at most `max_queued` bytes wait for the client (at once, on the
  // caller's thread, when that holds already); dropped when the socket closes first.
  void on_drained(std::size_t max_queued, std::function<void()> fn);

 private:
  std::weak_ptr<detail::WsSession> session_;
};

class WebSocketHandler {
 public:
  virtual ~WebSocketHandler() = default;
  // The handshake is done: `socket` is the handle to send with (keep it).
  virtual void on_open(std::shared_ptr<WebSocket> socket) = 0;
  // One whole text message.
  virtual void on_text(std::string message) = 0;
  // The socket is closed (either side, a failure, or the server stopping). Once; no
  // callback follows. Not called when the handshake failed before on_open.
  virtual void on_close() = 0;
};

}  // namespace cela::api
