// Responder: how a handler answers its one request, now or later, from any thread.
//
// Exactly one of json / error / raw / no_content / start_sse / start_chunked /
// upgrade_websocket takes effect; later calls are ignored (and logged). Every method
// is thread-safe: it hands the answer to the connection's strand and returns at once.
//
// Deferred answers: a handler that cannot answer before returning (it waits for a
// session, or does blocking work) keeps the responder alive and answers later:
//
//   void create(Request& req, Responder& res) {
//     server.post_blocking([r = res.shared_from_this()] {
//       auto session = sessions.create(r->request().body);  // blocking
//       if (!session) return r->error(from_error(session.error()));
//       r->json(201, to_json(*session));
//     });
//   }
//
// The Request lives inside the Responder, so `r->request()` stays valid. A responder
// that is destroyed without having answered answers 500 `internal` by itself (a
// forgotten path never hangs the client). Handles may outlive the connection (the
// client left): answering then does nothing, and client_gone() says so.
#pragma once

#include <atomic>
#include <boost/json/value.hpp>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "api/body_sink.h"
#include "api/http_error.h"
#include "api/relay.h"
#include "api/request.h"
#include "api/stream.h"
#include "api/websocket.h"

namespace cela::api {

namespace detail {
class Connection;
}

class Responder : public std::enable_shared_from_this<Responder> {
 public:
  // Made by the connection for each routed request.
  Responder(std::weak_ptr<detail::Connection> connection, Request request,
            std::size_t stream_buffer_limit);
  ~Responder();
  Responder(const Responder&) = delete;
  Responder& operator=(const Responder&) = delete;

  Request& request() { return request_; }
  const Request& request() const { return request_; }
  const std::string& request_id() const { return request_.request_id; }

  // Content-Type: application/json.
  void json(int status, const boost::json::value& body, Headers extra = {});
  // The API.md error body with this request's id, plus Retry-After / WWW-Authenticate.
  // Errors of status >= 500 and any log_detail are written to the daemon log.
  void error(const ApiError& e);
  // An internal failure, mapped once by from_error() (http_error.h).
  void error(const Error& e);
  // Any body. An empty content_type sends none. For HEAD, pass the size in a
  // Content-Length extra header and an empty body.
  void raw(int status, std::string_view content_type, std::string body, Headers extra = {});
  // 204.
  void no_content(Headers extra = {});

  // 200 text/event-stream. Never null: when an answer was already given, the stream
  // comes back closed.
  std::shared_ptr<SseStream> start_sse(Headers extra = {});
  // `status` with Transfer-Encoding: chunked (HTTP/1.1; an HTTP/1.0 client gets a
  // close-delimited body). Never null, as above.
  std::shared_ptr<ChunkedWriter> start_chunked(int status, std::string_view content_type,
                                               Headers extra = {});

  // Streamed routes only (api/relay.h): `relay` reads the rest of the request and
  // answers it itself. Counts as the answer.
  void relay(std::shared_ptr<Relay> relay);
  // 101: the request becomes a WebSocket spoken by `handler` (api/websocket.h); a
  // request that is not a WebSocket upgrade is answered 400 instead.
  void upgrade_websocket(std::shared_ptr<WebSocketHandler> handler);

  // Streamed routes only (api/body_sink.h): the body goes to `sink`. Call at most once,
  // before answering; the sink answers through this responder.
  void accept_body(std::shared_ptr<BodySink> sink);

  bool responded() const { return responded_.load(); }
  // The connection is closed (the client left or the server is stopping).
  bool client_gone() const;

 private:
  // Marks the answer as given; false (and a log line) when it already was.
  bool claim(std::string_view what);
  std::shared_ptr<detail::StreamChannel> open_channel();

  const std::weak_ptr<detail::Connection> connection_;
  Request request_;
  const std::size_t stream_buffer_limit_;
  std::atomic<bool> responded_{false};
};

}  // namespace cela::api
