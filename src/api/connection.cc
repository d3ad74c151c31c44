#include "api/connection.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/chunk_encode.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/serialize.hpp>

#include "common/json_text.h"
#include <sstream>

#include "api/responder.h"
#include "api/server_core.h"
#include "api/stream_channel.h"
#include "api/ws_session.h"
#include "obs/catalog.h"

namespace cela::api::detail {
namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// How long a closing connection still reads (and drops) what the client sends: closing
// a socket with unread input resets the connection, and the client may then lose the
// answer we just wrote (e.g. a 413 sent before the body it is still uploading).
constexpr std::chrono::milliseconds kLingerTimeout{2000};

bool is_http_parse_error(const error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_method).category();
}

void run_callbacks(std::vector<std::function<void()>> callbacks) {
  for (auto& fn : callbacks) fn();
}

std::string seconds_text(std::chrono::milliseconds ms) {
  std::ostringstream out;
  out << static_cast<double>(ms.count()) / 1000.0 << " s";
  return out.str();
}

// Payload headers of a complete answer. 1xx/204/304 carry none; HEAD keeps the length
// the handler set (or that of the body it passed) and sends no body.
void finalize_payload(StringResponse& res, bool head_request) {
  unsigned status = res.result_int();
  if (status < 200 || status == 204 || status == 304) {
    res.body().clear();
    res.erase(http::field::content_length);
    return;
  }
  if (head_request) {
    if (res.find(http::field::content_length) == res.end()) res.content_length(res.body().size());
    res.body().clear();
    return;
  }
  res.content_length(res.body().size());
}

StringResponse error_response(const ApiError& error, std::string_view request_id,
                              const Headers& extra, ErrorStyle style = ErrorStyle::cela) {
  RenderedError rendered = render_error(style, error, request_id);
  StringResponse res;
  res.result(static_cast<unsigned>(rendered.status));
  res.set(http::field::content_type, "application/json");
  for (const auto& [name, value] : error_headers(error)) res.set(name, value);
  for (const auto& [name, value] : extra) res.set(name, value);
  res.body() = std::move(rendered.body);
  return res;
}

std::optional<PeerCred> peer_credentials(int fd) {
  struct ucred cred {};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
  return PeerCred{cred.pid, cred.uid, cred.gid};
}

std::string tcp_peer_address(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (addr.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  return "?";
}

// The whole answer to a refused connection, "Connection: close" included.
std::string refusal_bytes(const ApiError& error) {
  std::string request_id = new_request_id();
  StringResponse res = error_response(error, request_id, {});
  res.set(http::field::server, "cela");
  res.set("X-Request-Id", request_id);
  res.keep_alive(false);
  finalize_payload(res, false);
  std::ostringstream out;
  out << res;
  return out.str();
}

ApiError refusal_error(const ServerCore& core, SlotRefusal refusal) {
  const SlotLimits& limits = core.slots.limits();
  switch (refusal) {
    case SlotRefusal::peer:
      return ApiError::rate_limited("too many connections from this client (the limit is " +
                                        std::to_string(limits.per_peer) + ")",
                                    1);
    case SlotRefusal::key:
      return ApiError::rate_limited(
          "this API key has " + std::to_string(limits.per_key) + " requests in flight, its limit",
          1);
    case SlotRefusal::total:
      break;
  }
  return ApiError::capacity_exceeded("server is at its limit of " + std::to_string(limits.total) +
                                     " connections");
}

// A connection refused a slot: answered at once, its input drained briefly, then
// closed; the whole exchange lasts at most kLingerTimeout.
class Rejection : public std::enable_shared_from_this<Rejection> {
 public:
  Rejection(ServerCore& core, Socket socket, const ApiError& error)
      : core_(core),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        bytes_(refusal_bytes(error)) {}
  ~Rejection() { core_.rejecting.fetch_sub(1); }

  void start() {
    timer_.expires_after(kLingerTimeout);
    timer_.async_wait([self = shared_from_this()](error_code ec) {
      if (!ec) self->close();
    });
    asio::async_write(socket_, asio::buffer(bytes_),
                      [self = shared_from_this()](error_code ec, std::size_t) {
                        if (ec) return self->close();
                        error_code ignored;
                        self->socket_.shutdown(Socket::shutdown_send, ignored);
                        self->drain();
                      });
  }

 private:
  void drain() {
    socket_.async_read_some(asio::buffer(scratch_),
                            [self = shared_from_this()](error_code ec, std::size_t) {
                              if (ec) return self->close();
                              self->drain();
                            });
  }
  void close() {
    error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
  }

  ServerCore& core_;
  Socket socket_;
  asio::steady_timer timer_;
  std::string bytes_;
  std::array<char, 1024> scratch_{};
};

}  // namespace

void refuse_at_once(int fd, const ApiError& error) {
  std::string bytes = refusal_bytes(error);
  // A fresh socket's send buffer takes the few hundred bytes whole.
  (void)::send(fd, bytes.data(), bytes.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(fd, SHUT_WR);
  // Closing with unread input would reset the connection and could lose the answer;
  // the request usually arrived with the connection, so reading it now avoids that.
  std::array<char, 4096> scratch{};
  for (int i = 0; i < 16 && ::recv(fd, scratch.data(), scratch.size(), MSG_DONTWAIT) > 0; ++i) {
  }
  ::close(fd);
}

void admit_connection(ServerCore& core, Socket socket, Transport transport,
                      const std::string& local_label) {
  int fd = socket.native_handle();
  std::optional<PeerCred> peer;
  std::string remote;
  SlotPeer slot_peer;
  if (transport == Transport::unix_socket) {
    peer = peer_credentials(fd);
    remote = local_label;
    // No credentials: counted as one unknown peer, never as root.
    slot_peer = peer ? unix_slot_peer(peer->uid) : SlotPeer{"uid ?", false};
  } else {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE events go out at once
    sockaddr_storage address{};
    socklen_t len = sizeof address;
    getpeername(fd, reinterpret_cast<sockaddr*>(&address), &len);
    remote = tcp_peer_address(address);
    slot_peer = tcp_slot_peer(address);
  }
  auto slot = core.slots.open_connection(slot_peer);
  if (!slot) {
    ApiError error = refusal_error(core, slot.error());
    if (core.rejecting.fetch_add(1) >= kMaxRejecting) {
      core.rejecting.fetch_sub(1);
      return refuse_at_once(socket.release(), error);
    }
    std::make_shared<Rejection>(core, std::move(socket), error)->start();
    return;
  }
  auto connection = std::make_shared<Connection>(core, std::move(socket), transport, peer,
                                                 std::move(remote), std::move(*slot));
  core.add_connection(connection);
  connection->start();
}

Connection::Connection(ServerCore& core, Socket socket, Transport transport,
                       std::optional<PeerCred> peer, std::string remote_address,
                       ConnectionSlots::Lease slot)
    : core_(core),
      socket_(std::move(socket)),
      transport_(transport),
      peer_(peer),
      remote_address_(std::move(remote_address)),
      slot_(std::move(slot)),
      read_timer_(socket_.get_executor()),
      write_timer_(socket_.get_executor()),
      keepalive_timer_(socket_.get_executor()) {}

Connection::~Connection() {
  // Destroyed without finish() only when the server stops: the producer still learns
  // that its stream ended.
  if (stream_) run_callbacks(stream_->end());
}

template <class F>
void Connection::post(F&& fn) {
  // After stop() the io threads are gone; a post would only queue a handler that owns
  // this connection until the io_context is destroyed.
  if (core_.stopping.load()) return;
  asio::post(socket_.get_executor(),
             [self = shared_from_this(), fn = std::forward<F>(fn)]() mutable { fn(*self); });
}

void Connection::start() {
  post([](Connection& c) { c.read_next_request(); });
}

void Connection::send_response(std::shared_ptr<StringResponse> response) {
  post([response = std::move(response)](Connection& c) mutable {
    c.write_response(std::move(response));
  });
}

void Connection::begin_stream(std::shared_ptr<StreamChannel> channel,
                              std::shared_ptr<StreamHead> head, StreamKind kind) {
  post([channel = std::move(channel), head = std::move(head), kind](Connection& c) mutable {
    c.start_stream(std::move(channel), std::move(head), kind);
  });
}

void Connection::kick_stream() {
  post([](Connection& c) { c.pump_stream(); });
}

void Connection::schedule(std::chrono::milliseconds delay, std::function<void()> fn) {
  post([delay, fn = std::move(fn)](Connection& c) mutable {
    auto timer = std::make_shared<asio::steady_timer>(c.socket_.get_executor(), delay);
    timer->async_wait([timer, fn = std::move(fn)](error_code ec) {
      if (!ec) fn();
    });
  });
}

void Connection::abort_stream() {
  post([](Connection& c) { c.finish(); });
}

void Connection::close() {
  post([](Connection& c) { c.finish(); });
}

void Connection::relay(std::shared_ptr<Relay> relay) {
  post([relay = std::move(relay)](Connection& c) mutable { c.start_relay(std::move(relay)); });
}

void Connection::accept_body(std::shared_ptr<BodySink> sink) {
  if (core_.stopping.load()) return sink->abort(ApiError::capacity_exceeded("the server is stopping"));
  post([sink = std::move(sink)](Connection& c) mutable { c.start_body(std::move(sink)); });
}

void Connection::upgrade_websocket(std::shared_ptr<WebSocketHandler> handler) {
  post([handler = std::move(handler)](Connection& c) mutable { c.start_websocket(std::move(handler)); });
}

void Connection::log(std::string_view line) const {
  core_.log(line);
}

// ---- request cycle

void Connection::read_next_request() {
  if (closed_) return;
  request_.reset();
  route_ = nullptr;
  error_style_ = ErrorStyle::cela;
  request_id_.clear();
  method_.clear();
  path_.clear();
  tenant_.clear();
  version_ = 11;
  keep_alive_ = false;
  head_request_ = false;
  stream_parser_.reset();
  sink_.reset();
  expect_continue_ = false;

  parser_.emplace();
  parser_->header_limit(core_.config.header_limit);
  // The body limit depends on the route, known only after the header; until then the
  // parser must not refuse a large Content-Length by itself (route_request checks it).
  parser_->body_limit(boost::none);

  if (buffer_.size() > 0) return read_header();  // a pipelined request is already here
  // Wait for the first byte: a kept-alive connection may idle for idle_timeout, a new
  // one only header_timeout. The header timeout then runs from the first byte.
  arm_read_deadline(first_request_ ? core_.config.header_timeout : core_.config.idle_timeout);
  socket_.async_wait(Socket::wait_read, [self = shared_from_this()](error_code ec) {
    if (ec || self->read_timed_out_) return self->finish();
    self->read_header();
  });
}

void Connection::read_header() {
  arm_read_deadline(core_.config.header_timeout);
  http::async_read_header(
      socket_, buffer_, *parser_,
      [self = shared_from_this()](error_code ec, std::size_t) { self->on_header(ec); });
}

void Connection::on_header(error_code ec) {
  disarm_read_deadline();
  if (closed_) return;
  if (read_timed_out_) return finish();  // a slow header is cut off without an answer
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return finish();
  request_id_ = new_request_id();
  started_ = std::chrono::steady_clock::now();
  if (ec == http::error::header_limit) {
    return reject(ApiError::invalid_request("request header larger than " +
                                            std::to_string(core_.config.header_limit) + " bytes"));
  }
  if (is_http_parse_error(ec)) {
    return reject(ApiError::invalid_request("malformed HTTP request: " + ec.message()));
  }
  if (ec) return finish();
  first_request_ = false;
  // Before anything reads the body: keep_alive_ is still false, so the 400 closes.
  if (auto framing = check_framing(parser_->get(), parser_->get().version()); !framing)
    return reject(framing.error());
  route_request();
}

void Connection::route_request() {
  const auto& head = parser_->get();
  method_ = std::string(head.method_string());
  version_ = head.version();
  keep_alive_ = head.keep_alive();
  head_request_ = head.method() == http::verb::head;
  path_ = std::string(head.target().substr(0, head.target().find('?')));

  Request req;
  req.method = head.method();
  req.method_name = method_;
  req.target = std::string(head.target());
  req.headers = static_cast<const http::fields&>(head);
  req.request_id = request_id_;
  req.transport = transport_;
  req.peer = peer_;
  req.remote_address = remote_address_;

  auto target = parse_target(req.target);
  if (!target) return reject(target.error());
  req.path = std::move(target->path);
  req.segments = std::move(target->segments);
  req.query = std::move(target->query);

  // A request naming an E2B sandbox goes to the sandbox table, its path prefixed with
  // the port it is for (E2b-Sandbox-Port, default envd's): see HttpServer::sandbox_router.
  const bool for_sandbox = head.find("E2b-Sandbox-Id") != head.end();
  std::vector<std::string> sandbox_segments;
  if (for_sandbox) {
    error_style_ = ErrorStyle::e2b;
    auto port = head["E2b-Sandbox-Port"];
    sandbox_segments.emplace_back(port.empty() ? std::string(kEnvdPort) : std::string(port));
    sandbox_segments.insert(sandbox_segments.end(), req.segments.begin(), req.segments.end());
  }
  const Router& router = for_sandbox ? core_.sandbox_router : core_.router;
  RouteMatch match = router.match(req.method, for_sandbox ? sandbox_segments : req.segments);
  if (!match.route) {
    if (match.path_known) {
      return reject(ApiError::method_not_allowed(method_ + " is not allowed on " + path_),
                    {{"Allow", match.allow}});
    }
    return reject(ApiError::not_found("no such endpoint: " + path_));
  }
  route_ = match.route;
  req.params = std::move(match.params);
  // The sandbox table speaks E2B: its routes answer in E2B's shape unless they chose one.
  error_style_ = for_sandbox && route_->options.error_style == ErrorStyle::cela
                     ? ErrorStyle::e2b
                     : route_->options.error_style;
  req.error_style = error_style_;

  if (!route_->options.public_route) {
    std::expected<Principal, ApiError> principal =
        std::unexpected(ApiError::unauthorized("no authenticator is configured"));
    const Authenticator& authenticator =
        for_sandbox ? core_.sandbox_authenticator : core_.authenticator;
    if (authenticator) {
      try {
        principal = authenticator(req);
      } catch (const std::exception& e) {
        principal = std::unexpected(ApiError::internal(std::string("authenticator: ") + e.what()));
      }
    }
    if (!principal) return reject(principal.error());
    auto in_flight = core_.slots.begin_request(principal->key_id);
    if (!in_flight) {
      keep_alive_ = false;  // a client past its key's limit gives its connection back too
      return reject(refusal_error(core_, in_flight.error()));
    }
    request_slot_ = std::move(*in_flight);
    tenant_ = principal->tenant_id;
    req.principal = std::move(*principal);
  }

  std::size_t limit = route_->options.body_limit.value_or(core_.config.body_limit);
  if (auto length = parser_->content_length(); length && *length > limit) {
    return reject(ApiError::payload_too_large("request body of " + std::to_string(*length) +
                                              " bytes exceeds the limit of " +
                                              std::to_string(limit) + " bytes"));
  }
  parser_->body_limit(limit);  // enforced as chunks of a chunked body arrive
  request_ = std::move(req);
  if (route_->options.streamed_body) {
    // The handler decides before the body is read (api/body_sink.h); 100 Continue waits
    // for its sink.
    expect_continue_ = boost::beast::iequals(head[http::field::expect], "100-continue");
    if (!parser_->is_done()) {
      stream_parser_.emplace(std::move(*parser_));
      parser_.reset();
      stream_parser_->body_limit(limit);
    }
    return dispatch();
  }
  if (parser_->is_done()) return dispatch();

  // Expect: 100-continue: the client holds the body back until told to send it, which
  // is only now that the route, the principal and the declared size passed.
  if (boost::beast::iequals(head[http::field::expect], "100-continue")) {
    auto go_on =
        std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
    arm_write_deadline();
    http::async_write(socket_, *go_on,
                      [self = shared_from_this(), go_on](error_code ec, std::size_t) {
                        self->disarm_write_deadline();
                        if (ec) return self->finish();
                        self->read_body();
                      });
    return;
  }
  read_body();
}

void Connection::read_body() {
  arm_read_deadline(route_->options.body_timeout.value_or(core_.config.body_timeout));
  http::async_read(socket_, buffer_, *parser_,
                   [self = shared_from_this()](error_code ec, std::size_t) { self->on_body(ec); });
}

std::optional<ApiError> Connection::body_failure(error_code ec) const {
  if (read_timed_out_) {
    auto timeout = route_->options.body_timeout.value_or(core_.config.body_timeout);
    return ApiError::request_timeout("request body not received within " + seconds_text(timeout));
  }
  if (ec == http::error::body_limit) {
    std::size_t limit = route_->options.body_limit.value_or(core_.config.body_limit);
    return ApiError::payload_too_large("request body exceeds the limit of " + std::to_string(limit) +
                                       " bytes");
  }
  return std::nullopt;
}

void Connection::on_body(error_code ec) {
  disarm_read_deadline();
  if (closed_) return;
  if (auto failure = body_failure(ec)) return reject(*failure);
  if (ec == http::error::end_of_stream || ec == http::error::partial_message) return finish();
  if (is_http_parse_error(ec)) {
    return reject(ApiError::invalid_request("malformed request body: " + ec.message()));
  }
  if (ec) return finish();
  request_->body = std::move(parser_->get().body());
  dispatch();
}

void Connection::dispatch() {
  auto responder = std::make_shared<Responder>(weak_from_this(), std::move(*request_),
                                               core_.config.stream_buffer_limit);
  request_.reset();
  std::string failure;
  try {
    route_->handler(responder->request(), *responder);
  } catch (const std::exception& e) {
    failure = e.what();
  } catch (...) {
    failure = "unknown exception";
  }
  if (failure.empty()) return;
  if (!responder->responded()) {
    responder->error(ApiError::internal("handler threw: " + failure));
  } else {
    log("request " + request_id_ + ": handler threw after answering: " + failure);
  }
  // Dropping `responder` here: unless the handler kept it to answer later, a responder
  // that has not answered answers 500 from its destructor.
}

// ---- streamed bodies

void Connection::start_body(std::shared_ptr<BodySink> sink) {
  if (closed_ || sink_) return sink->abort(ApiError::invalid_request("the client went away"));
  sink_ = std::move(sink);
  sink_->begin(socket_.get_executor());
  if (!stream_parser_ || stream_parser_->is_done()) return end_body();
  if (!chunk_) chunk_ = std::make_unique<std::array<char, kBodyChunkBytes>>();
  arm_read_deadline(route_->options.body_timeout.value_or(core_.config.body_timeout));
  if (!expect_continue_) return read_chunk();
  auto go_on = std::make_shared<http::response<http::empty_body>>(http::status::continue_, version_);
  arm_write_deadline();
  http::async_write(socket_, *go_on, [self = shared_from_this(), go_on](error_code ec, std::size_t) {
    self->disarm_write_deadline();
    if (ec) {
      self->abort_body(ApiError::invalid_request("the client went away"));
      return self->finish();
    }
    self->read_chunk();
  });
}

void Connection::read_chunk() {
  if (closed_ || !sink_) return;
  if (read_timed_out_) return on_chunk({});
  auto& body = stream_parser_->get().body();
  body.data = chunk_->data();
  body.size = chunk_->size();
  http::async_read(socket_, buffer_, *stream_parser_,
                   [self = shared_from_this()](error_code ec, std::size_t) { self->on_chunk(ec); });
}

void Connection::on_chunk(error_code ec) {
  if (closed_ || !sink_) return;
  if (ec == http::error::need_buffer) ec = {};  // the chunk buffer is full
  if (auto failure = body_failure(ec)) return abort_body(*failure);
  if (is_http_parse_error(ec) && ec != http::error::partial_message &&
      ec != http::error::end_of_stream) {
    return abort_body(ApiError::invalid_request("malformed request body: " + ec.message()));
  }
  if (ec) {
    abort_body(ApiError::invalid_request("the client went away before the body was complete"));
    return finish();
  }
  std::size_t n = chunk_->size() - stream_parser_->get().body().size;
  if (n == 0) return on_chunk_taken(true);
  sink_->write(std::string_view(chunk_->data(), n), [weak = weak_from_this()](bool more) {
    if (auto c = weak.lock()) c->post([more](Connection& self) { self.on_chunk_taken(more); });
  });
}

void Connection::on_chunk_taken(bool more) {
  if (closed_ || !sink_) return;
  if (!more) {
    // The sink answered (or is answering): no more of the body is read, and the
    // connection closes after the answer.
    disarm_read_deadline();
    sink_.reset();
    return;
  }
  if (stream_parser_->is_done()) return end_body();
  read_chunk();
}

void Connection::end_body() {
  disarm_read_deadline();
  auto sink = std::move(sink_);  // leaves sink_ empty
  sink->finish();
}

void Connection::abort_body(const ApiError& why) {
  disarm_read_deadline();
  auto sink = std::move(sink_);  // leaves sink_ empty
  if (sink) sink->abort(why);
}

// ---- answers

void Connection::reject(const ApiError& error, const Headers& extra) {
  if (request_id_.empty()) request_id_ = new_request_id();
  obs::catalog::errors().add({error.code});
  if (error.status >= 500 || !error.log_detail.empty()) {
    log("request " + request_id_ + ": " + error.code + ": " +
        (error.log_detail.empty() ? error.message : error.log_detail));
  }
  write_response(
      std::make_shared<StringResponse>(error_response(error, request_id_, extra, error_style_)));
}

bool Connection::body_unread() const {
  if (stream_parser_) return !stream_parser_->is_done();
  return !parser_ || !parser_->is_header_done() || !parser_->is_done();
}

void Connection::write_response(std::shared_ptr<StringResponse> response) {
  if (closed_) return;
  response->version(version_);
  response->set(http::field::server, "cela");
  response->set("X-Request-Id", request_id_);
  finalize_payload(*response, head_request_);
  // An answer given before the body was read leaves the rest of the byte stream
  // unparseable: the connection closes after it.
  bool keep_alive = keep_alive_ && !body_unread() && !core_.stopping.load();
  response->keep_alive(keep_alive);
  out_ = std::move(response);
  int status = static_cast<int>(out_->result_int());
  // The request is answered once its answer is handed over: a client that reads it
  // and sends the next at once must find the key's slot free, not race our completion.
  request_slot_.reset();
  arm_write_deadline();
  http::async_write(socket_, *out_,
                    [self = shared_from_this(), keep_alive, status](error_code ec, std::size_t) {
                      self->log_access(status);
                      self->on_response_written(ec, keep_alive);
                    });
}

void Connection::on_response_written(error_code ec, bool keep_alive) {
  disarm_write_deadline();
  out_.reset();
  if (ec) return finish();
  if (!keep_alive) return graceful_close();
  read_next_request();
}

void Connection::log_access(int status) {
  if (!core_.config.access_log) return;
  AccessRecord record;
  record.request_id = request_id_;
  record.method = method_;
  record.path = path_;
  record.route = route_ ? std::string_view(route_->pattern) : std::string_view();
  record.status = status;
  record.duration = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - started_);
  record.transport = transport_;
  record.tenant_id = tenant_;
  try {
    core_.config.access_log(record);
  } catch (...) {
    // An access log must not take the connection down.
  }
}

// ---- streams

void Connection::start_stream(std::shared_ptr<StreamChannel> channel,
                              std::shared_ptr<StreamHead> head, StreamKind kind) {
  if (closed_) return run_callbacks(channel->end());
  stream_ = std::move(channel);
  stream_kind_ = kind;
  stream_chunked_ = version_ >= 11;
  // SSE ends with its connection; a chunked download may keep it alive. HTTP/1.0 has no
  // chunked encoding: the body then ends when the connection closes.
  stream_keep_alive_ =
      kind == StreamKind::chunked && stream_chunked_ && keep_alive_ && !body_unread();
  head->version(version_);
  head->set(http::field::server, "cela");
  head->set("X-Request-Id", request_id_);
  if (stream_chunked_) head->chunked(true);
  head->keep_alive(stream_keep_alive_);
  stream_head_ = std::move(head);
  stream_serializer_.emplace(*stream_head_);
  int status = static_cast<int>(stream_head_->result_int());
  stream_writing_ = true;  // no chunk may start before the header is out
  arm_write_deadline();
  http::async_write_header(socket_, *stream_serializer_,
                           [self = shared_from_this(), status](error_code ec, std::size_t) {
                             self->log_access(status);
                             self->on_stream_head_written(ec);
                           });
}

void Connection::on_stream_head_written(error_code ec) {
  disarm_write_deadline();
  stream_writing_ = false;
  stream_serializer_.reset();
  stream_head_.reset();
  if (ec || closed_) return finish();
  if (stream_kind_ == StreamKind::sse) {
    watch_peer();
    arm_keepalive();
  }
  pump_stream();
}

void Connection::pump_stream() {
  if (closed_ || !stream_ || stream_writing_) return;
  auto batch = stream_->next_batch();
  if (!batch) return;
  if (batch->end) return write_stream_end();
  stream_out_ = std::move(batch->data);
  stream_writing_ = true;
  arm_write_deadline();
  auto done = [self = shared_from_this()](error_code ec, std::size_t) {
    self->on_stream_written(ec);
  };
  if (stream_chunked_) {
    asio::async_write(socket_, http::make_chunk(asio::buffer(stream_out_)), std::move(done));
  } else {
    asio::async_write(socket_, asio::buffer(stream_out_), std::move(done));
  }
}

void Connection::on_stream_written(error_code ec) {
  disarm_write_deadline();
  stream_writing_ = false;
  stream_out_.clear();
  if (stream_) stream_->batch_written();
  if (ec || closed_) return finish();
  pump_stream();
}

void Connection::write_stream_end() {
  stream_writing_ = true;
  request_slot_.reset();  // as for an answer: free before the client can see the end
  if (!stream_chunked_) return on_stream_ended({});
  arm_write_deadline();
  asio::async_write(
      socket_, http::make_chunk_last(),
      [self = shared_from_this()](error_code ec, std::size_t) { self->on_stream_ended(ec); });
}

void Connection::on_stream_ended(error_code ec) {
  disarm_write_deadline();
  stream_writing_ = false;
  keepalive_timer_.cancel();
  auto channel = std::move(stream_);
  stream_.reset();
  if (channel) run_callbacks(channel->end());
  if (ec || closed_) return finish();
  if (stream_keep_alive_) return read_next_request();
  graceful_close();
}

// Reads (and drops) whatever the client sends; its end means the client is gone. Used
// under an SSE stream, whose producer may be idle for long, and while lingering.
void Connection::watch_peer() {
  peer_reading_ = true;
  socket_.async_read_some(asio::buffer(scratch_),
                          [self = shared_from_this()](error_code ec, std::size_t) {
                            if (!ec && !self->closed_) return self->watch_peer();
                            self->peer_reading_ = false;
                            self->finish();
                          });
}

void Connection::arm_keepalive() {
  auto interval = core_.config.sse_keepalive;
  if (interval.count() <= 0) return;
  keepalive_timer_.expires_after(interval);
  keepalive_timer_.async_wait([self = shared_from_this()](error_code ec) {
    if (ec || self->closed_ || !self->stream_) return;
    if (self->stream_->write(": keepalive\n\n")) self->arm_keepalive();
  });
}

// ---- relays

void Connection::start_relay(std::shared_ptr<Relay> relay) {
  if (closed_ || relay_) return relay->abort();
  relay_ = relay;
  auto* body = stream_parser_ && !stream_parser_->is_done() ? &*stream_parser_ : nullptr;
  RelayRequest request{socket_,       buffer_,          body,        version_, keep_alive_ && !core_.stopping.load(),
                       head_request_, expect_continue_, request_id_, shared_from_this()};
  relay->start(std::move(request), [self = shared_from_this()](RelayEnd end) { self->end_relay(std::move(end)); });
}

void Connection::end_relay(RelayEnd end) {
  relay_.reset();
  if (closed_) return;
  // Nothing was sent: answered as any error (closing when the body is unread).
  if (end.error) return reject(*end.error);
  if (end.status) log_access(end.status);
  request_slot_.reset();
  if (!end.reuse) return end.status ? graceful_close() : finish();
  read_next_request();
}

// ---- WebSocket

void Connection::start_websocket(std::shared_ptr<WebSocketHandler> handler) {
  if (closed_) return;
  if (!parser_ || !boost::beast::websocket::is_upgrade(parser_->get()))
    return reject(ApiError::invalid_request("this endpoint takes a WebSocket upgrade (GET with Upgrade: websocket)"));
  // The key's request slot stays held until the socket closes (finish()).
  auto ws = std::make_shared<WsSession>(core_, shared_from_this(), socket_, std::move(handler));
  ws_ = ws;
  ws->start(parser_->get(), request_id_, [self = shared_from_this()](int status) { self->log_access(status); });
}

// ---- closing

void Connection::graceful_close() {
  if (closed_) return;
  error_code ignored;
  socket_.shutdown(Socket::shutdown_send, ignored);
  arm_read_deadline(kLingerTimeout);
  if (!peer_reading_) watch_peer();
}

void Connection::finish() {
  if (closed_.exchange(true)) return;
  ++read_generation_;
  ++write_generation_;
  read_timer_.cancel();
  write_timer_.cancel();
  keepalive_timer_.cancel();
  error_code ignored;
  socket_.close(ignored);
  if (stream_) {
    auto channel = std::move(stream_);
    stream_.reset();
    run_callbacks(channel->end());
  }
  if (sink_) abort_body(ApiError::invalid_request("the client went away"));
  if (auto relay = std::move(relay_)) relay->abort();
  if (auto ws = ws_.lock()) ws->shutdown();
  request_slot_.reset();
  slot_.reset();
  // Drops the registry's reference; the handler running this holds another.
  core_.remove_connection(this);
}

// ---- deadlines

void Connection::arm_read_deadline(std::chrono::milliseconds timeout) {
  read_timed_out_ = false;
  read_timer_.expires_after(timeout);
  read_timer_.async_wait(
      [self = shared_from_this(), generation = ++read_generation_](error_code ec) {
        if (ec || generation != self->read_generation_ || self->closed_) return;
        // Cancel, not close: a body timeout still answers 408 on this socket.
        self->read_timed_out_ = true;
        error_code ignored;
        self->socket_.cancel(ignored);
      });
}

void Connection::disarm_read_deadline() {
  ++read_generation_;
  read_timer_.cancel();
}

void Connection::arm_write_deadline() {
  write_timer_.expires_after(core_.config.write_timeout);
  write_timer_.async_wait(
      [self = shared_from_this(), generation = ++write_generation_](error_code ec) {
        if (ec || generation != self->write_generation_ || self->closed_) return;
        self->finish();  // the client stopped reading
      });
}

void Connection::disarm_write_deadline() {
  ++write_generation_;
  write_timer_.cancel();
}

}  // namespace cela::api::detail
