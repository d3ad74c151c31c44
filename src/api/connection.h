// Connection (internal to api/): one accepted client socket, unix or TCP, served on its
// own strand: reads requests one after the other (keep-alive), routes, authenticates,
// reads the body, calls the handler, writes the answer or the stream.
//
// Deadlines are steady timers armed per phase (idle, header, body, each write); each
// arm bumps a generation number so that a timer that fired just as its phase ended
// cannot cut the next phase short.
//
// Ownership: the server's registry owns an open connection; pending async operations
// own it too (they capture shared_from_this()). Responders and streams hold weak
// references and reach it only through the thread-safe methods below, which post onto
// the strand.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "api/body_sink.h"
#include "api/connection_slots.h"
#include "api/http_error.h"
#include "api/relay.h"
#include "api/request.h"
#include "api/router.h"
#include "api/websocket.h"

namespace cela::api::detail {

struct ServerCore;
class StreamChannel;
class WsSession;

using Socket = boost::asio::generic::stream_protocol::socket;
using StringResponse = http::response<http::string_body>;
using StreamHead = http::response<http::empty_body>;

enum class StreamKind { sse, chunked };

// Takes a freshly accepted socket: serves it when a connection slot is free for its
// peer (api/connection_slots.h); else answers the refusal (503 capacity_exceeded, 429
// rate_limited) and closes it.
void admit_connection(ServerCore& core, Socket socket, Transport transport,
                      const std::string& local_label);
// Answers `error` on the accepted socket `fd` with one non-blocking write, drops what
// the client already sent, and closes it: for when no descriptor or lingering slot is
// left to do it properly. Never blocks.
void refuse_at_once(int fd, const ApiError& error);

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(ServerCore& core, Socket socket, Transport transport, std::optional<PeerCred> peer,
             std::string remote_address, ConnectionSlots::Lease slot);
  ~Connection();

  void start();

  // ---- thread-safe: each posts onto the strand
  void send_response(std::shared_ptr<StringResponse> response);
  void begin_stream(std::shared_ptr<StreamChannel> channel, std::shared_ptr<StreamHead> head,
                    StreamKind kind);
  void kick_stream();
  void abort_stream();
  // Runs `fn` on the strand after `delay` (a stream's timers, StreamChannel::after).
  // Not cancelled when the connection ends: `fn` checks what it needs.
  void schedule(std::chrono::milliseconds delay, std::function<void()> fn);
  void close();
  // A streamed route hands its request to `relay` (api/relay.h), which answers it whole.
  void relay(std::shared_ptr<Relay> relay);
  // A streamed route's body goes to `sink` (api/body_sink.h).
  void accept_body(std::shared_ptr<BodySink> sink);
  // The request becomes a WebSocket spoken by `handler` (api/websocket.h); a request
  // that is not a WebSocket upgrade is answered 400.
  void upgrade_websocket(std::shared_ptr<WebSocketHandler> handler);
  bool is_closed() const { return closed_.load(); }
  void log(std::string_view line) const;

 private:
  template <class F>
  void post(F&& fn);

  // Request cycle, in order.
  void read_next_request();
  void read_header();
  void on_header(boost::system::error_code ec);
  void route_request();
  void read_body();
  void on_body(boost::system::error_code ec);
  // 408 after the body deadline, 413 past the route's body limit.
  std::optional<ApiError> body_failure(boost::system::error_code ec) const;
  void dispatch();

  // A streamed body, chunk by chunk into the sink.
  void start_body(std::shared_ptr<BodySink> sink);
  void read_chunk();
  void on_chunk(boost::system::error_code ec);
  void on_chunk_taken(bool more);
  void end_body();
  void abort_body(const ApiError& why);

  // Answers.
  void reject(const ApiError& error, const Headers& extra = {});
  void write_response(std::shared_ptr<StringResponse> response);
  void on_response_written(boost::system::error_code ec, bool keep_alive);
  void log_access(int status);

  // Streams.
  void start_stream(std::shared_ptr<StreamChannel> channel, std::shared_ptr<StreamHead> head,
                    StreamKind kind);
  void on_stream_head_written(boost::system::error_code ec);
  void pump_stream();
  void on_stream_written(boost::system::error_code ec);
  void write_stream_end();
  void on_stream_ended(boost::system::error_code ec);
  void watch_peer();
  void arm_keepalive();

  // Relays (api/relay.h).
  void start_relay(std::shared_ptr<Relay> relay);
  void end_relay(RelayEnd end);
  // WebSocket (api/ws_session.h ends the connection through finish()).
  friend class WsSession;
  void start_websocket(std::shared_ptr<WebSocketHandler> handler);

  // Closing.
  void graceful_close();
  void drain();
  void finish();

  // Deadlines.
  void arm_read_deadline(std::chrono::milliseconds timeout);
  void disarm_read_deadline();
  void arm_write_deadline();
  void disarm_write_deadline();

  bool body_unread() const;

  ServerCore& core_;
  Socket socket_;
  const Transport transport_;
  const std::optional<PeerCred> peer_;
  const std::string remote_address_;
  ConnectionSlots::Lease slot_;          // this connection's slot, until finish()
  ConnectionSlots::Lease request_slot_;  // the key's slot of the request in flight

  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  // A streamed route's body: the header parser is converted to this one.
  std::optional<http::request_parser<http::buffer_body>> stream_parser_;
  std::shared_ptr<BodySink> sink_;
  std::unique_ptr<std::array<char, kBodyChunkBytes>> chunk_;
  bool expect_continue_ = false;
  boost::asio::steady_timer read_timer_;
  boost::asio::steady_timer write_timer_;
  boost::asio::steady_timer keepalive_timer_;
  std::uint64_t read_generation_ = 0;
  std::uint64_t write_generation_ = 0;
  bool read_timed_out_ = false;
  bool first_request_ = true;
  std::atomic<bool> closed_{false};

  // The request in progress.
  std::optional<Request> request_;
  const Route* route_ = nullptr;
  ErrorStyle error_style_ = ErrorStyle::cela;  // of route_, or of the table searched
  std::string request_id_;
  std::string method_;
  std::string path_;
  std::string tenant_;
  unsigned version_ = 11;
  bool keep_alive_ = false;
  bool head_request_ = false;
  std::chrono::steady_clock::time_point started_;

  std::shared_ptr<StringResponse> out_;

  // The stream in progress.
  std::shared_ptr<StreamChannel> stream_;
  std::shared_ptr<StreamHead> stream_head_;
  std::optional<http::response_serializer<http::empty_body>> stream_serializer_;
  StreamKind stream_kind_ = StreamKind::sse;
  bool stream_chunked_ = true;
  bool stream_keep_alive_ = false;
  bool stream_writing_ = false;
  std::string stream_out_;

  std::shared_ptr<Relay> relay_;  // the relay in progress
  std::weak_ptr<WsSession> ws_;  // once upgraded

  bool peer_reading_ = false;
  std::array<char, 1024> scratch_{};
};

}  // namespace cela::api::detail
