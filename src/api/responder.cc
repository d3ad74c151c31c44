#include "api/responder.h"
#include "obs/catalog.h"

#include <boost/json/serialize.hpp>

#include "common/json_text.h"
#include <cstdio>

#include "api/connection.h"
#include "api/stream_channel.h"

namespace cela::api {
namespace {

void log_via(const std::weak_ptr<detail::Connection>& connection, const std::string& line) {
  if (auto c = connection.lock()) {
    c->log(line);
  } else {
    std::fprintf(stderr, "cela api: %s\n", line.c_str());
  }
}

template <class Message>
void set_headers(Message& message, const Headers& extra) {
  for (const auto& [name, value] : extra) message.set(name, value);
}

}  // namespace

Responder::Responder(std::weak_ptr<detail::Connection> connection, Request request,
                     std::size_t stream_buffer_limit)
    : connection_(std::move(connection)),
      request_(std::move(request)),
      stream_buffer_limit_(stream_buffer_limit) {}

Responder::~Responder() {
  if (responded_.load()) return;
  error(ApiError::internal("handler for " + request_.method_name + " " + request_.path +
                           " finished without answering"));
}

bool Responder::claim(std::string_view what) {
  if (!responded_.exchange(true)) return true;
  log_via(connection_,
          "request " + request_.request_id + ": second answer (" + std::string(what) + ") ignored");
  return false;
}

bool Responder::client_gone() const {
  auto c = connection_.lock();
  return !c || c->is_closed();
}

void Responder::json(int status, const boost::json::value& body, Headers extra) {
  raw(status, "application/json", cela::json_text(body), std::move(extra));
}

void Responder::error(const ApiError& e) {
  obs::catalog::errors().add({e.code});
  if (e.status >= 500 || !e.log_detail.empty()) {
    log_via(connection_, "request " + request_.request_id + ": " + e.code + ": " +
                             (e.log_detail.empty() ? e.message : e.log_detail));
  }
  RenderedError rendered = render_error(request_.error_style, e, request_.request_id);
  raw(rendered.status, "application/json", std::move(rendered.body), error_headers(e));
}

void Responder::error(const Error& e) { error(from_error(e)); }

void Responder::raw(int status, std::string_view content_type, std::string body, Headers extra) {
  if (!claim("raw")) return;
  auto response = std::make_shared<detail::StringResponse>();
  response->result(static_cast<unsigned>(status));
  if (!content_type.empty()) response->set(http::field::content_type, content_type);
  set_headers(*response, extra);
  response->body() = std::move(body);
  if (auto c = connection_.lock()) c->send_response(std::move(response));
}

void Responder::accept_body(std::shared_ptr<BodySink> sink) {
  auto c = connection_.lock();
  if (!c) return sink->abort(ApiError::invalid_request("the client went away"));
  c->accept_body(std::move(sink));
}

void Responder::relay(std::shared_ptr<Relay> relay) {
  if (!claim("relay")) return relay->abort();
  if (auto c = connection_.lock()) c->relay(std::move(relay));
  else relay->abort();
}

void Responder::upgrade_websocket(std::shared_ptr<WebSocketHandler> handler) {
  if (!claim("upgrade_websocket")) return;
  if (auto c = connection_.lock()) c->upgrade_websocket(std::move(handler));
}

void Responder::no_content(Headers extra) {
  raw(204, {}, {}, std::move(extra));
}

std::shared_ptr<detail::StreamChannel> Responder::open_channel() {
  return std::make_shared<detail::StreamChannel>(connection_, stream_buffer_limit_);
}

std::shared_ptr<SseStream> Responder::start_sse(Headers extra) {
  auto channel = open_channel();
  auto stream = std::make_shared<SseStream>(channel);
  if (!claim("start_sse")) {
    channel->end();
    return stream;
  }
  auto head = std::make_shared<detail::StreamHead>();
  head->result(http::status::ok);
  head->set(http::field::content_type, "text/event-stream");
  head->set(http::field::cache_control, "no-cache");
  head->set("X-Accel-Buffering", "no");  // reverse proxies must not hold events back
  set_headers(*head, extra);
  if (auto c = connection_.lock()) {
    c->begin_stream(channel, std::move(head), detail::StreamKind::sse);
  } else {
    channel->end();
  }
  return stream;
}

std::shared_ptr<ChunkedWriter> Responder::start_chunked(int status, std::string_view content_type,
                                                        Headers extra) {
  auto channel = open_channel();
  auto writer = std::make_shared<ChunkedWriter>(channel);
  if (!claim("start_chunked")) {
    channel->end();
    return writer;
  }
  auto head = std::make_shared<detail::StreamHead>();
  head->result(static_cast<unsigned>(status));
  if (!content_type.empty()) head->set(http::field::content_type, content_type);
  set_headers(*head, extra);
  if (auto c = connection_.lock()) {
    c->begin_stream(channel, std::move(head), detail::StreamKind::chunked);
  } else {
    channel->end();
  }
  return writer;
}

}  // namespace cela::api
