// WsSession (internal to api/): one upgraded connection speaking WebSocket, on the
// connection's strand. It reads messages into the route's WebSocketHandler and writes
// the bounded queue of outgoing ones (api/websocket.h has the rules).
//
// Ownership: its pending reads and writes own it, and it owns its Connection (whose
// socket it speaks over) until it ends; the connection and the WebSocket handles hold
// weak references. It ends once, on the strand: the handler's on_close runs and the
// connection finishes (closes its socket, gives back its slots).
//
// Lock order: the queue's mutex is a leaf; nothing calls out while holding it.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/websocket.h"

namespace cela::api::detail {

class Connection;
struct ServerCore;

class WsSession : public std::enable_shared_from_this<WsSession> {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;

  WsSession(ServerCore& core, std::shared_ptr<Connection> connection, Socket& socket,
            std::shared_ptr<WebSocketHandler> handler);

  // ---- strand
  // The handshake answer to `request` (a checked upgrade); on success the handler's
  // on_open, then the read loop. `on_answered(status)` logs the access (101, or the
  // failure).
  void start(const boost::beast::http::request<boost::beast::http::string_body>& request,
             const std::string& request_id, std::function<void(int)> on_answered);
  // Ends the session (idempotent): the connection is closing or already closed.
  void shutdown();

  // ---- any thread (through WebSocket)
  bool send(std::string text);
  void close(std::uint16_t code, std::string reason);
  bool closed() const;
  void post(std::function<void()> fn);
  bool on_strand() const;
  void on_drained(std::size_t max_queued, std::function<void()> fn);

 private:
  void read();
  void on_read(boost::system::error_code ec);
  void pump();
  void on_written(boost::system::error_code ec);
  void start_close(std::uint16_t code, std::string reason);
  // Posts pump() unless one is scheduled; false when there is no connection to post to.
  void kick();

  ServerCore& core_;
  std::shared_ptr<Connection> connection_;  // until shutdown()
  boost::beast::websocket::stream<Socket&> ws_;
  std::shared_ptr<WebSocketHandler> handler_;
  const WebSocketConfig& config_;
  boost::beast::flat_buffer read_buffer_;

  // strand only
  bool opened_ = false;
  bool ended_ = false;
  bool writing_ = false;
  bool closing_ = false;  // a close frame was started
  std::string out_;       // the message being written

  mutable std::mutex mu_;
  std::deque<std::string> queue_;
  std::size_t queued_bytes_ = 0;  // queue_ plus out_
  bool closed_ = false;           // no more sends
  bool scheduled_ = false;        // a pump is posted
  std::optional<std::pair<std::uint16_t, std::string>> close_after_;  // close() asked
  std::vector<std::pair<std::size_t, std::function<void()>>> drained_;
};

}  // namespace cela::api::detail
