#include "api/websocket.h"

#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/websocket/rfc6455.hpp>

#include "api/connection.h"
#include "api/server_core.h"
#include "api/ws_session.h"

namespace cela::api {
namespace detail {
namespace asio = boost::asio;
namespace websocket = boost::beast::websocket;
using boost::system::error_code;

WsSession::WsSession(ServerCore& core, std::shared_ptr<Connection> connection, Socket& socket,
                     std::shared_ptr<WebSocketHandler> handler)
    : core_(core),
      connection_(std::move(connection)),
      ws_(socket),
      handler_(std::move(handler)),
      config_(core.config.websocket) {}

void WsSession::start(const http::request<http::string_body>& request, const std::string& request_id,
                      std::function<void(int)> on_answered) {
  websocket::stream_base::timeout timeouts;
  timeouts.handshake_timeout = config_.handshake_timeout;
  // Beast pings after half the idle timeout without input and fails the connection
  // after the other half: a ping every ping_interval, a silent peer cut after two.
  timeouts.idle_timeout = config_.ping_interval * 2;
  timeouts.keep_alive_pings = true;
  ws_.set_option(timeouts);
  ws_.set_option(websocket::stream_base::decorator([request_id](websocket::response_type& res) {
    res.set(http::field::server, "cela");
    res.set("X-Request-Id", request_id);
  }));
  ws_.read_message_max(config_.max_message);
  ws_.auto_fragment(false);
  ws_.async_accept(request, [self = shared_from_this(), on_answered = std::move(on_answered)](error_code ec) {
    on_answered(ec ? 400 : 101);
    if (ec || self->ended_) return self->shutdown();
    self->opened_ = true;
    self->handler_->on_open(std::make_shared<WebSocket>(self->weak_from_this()));
    self->read();
    self->pump();
  });
}

void WsSession::read() {
  if (ended_) return;
  ws_.async_read(read_buffer_, [self = shared_from_this()](error_code ec, std::size_t) { self->on_read(ec); });
}

void WsSession::on_read(error_code ec) {
  if (ended_) return;
  // Closed by the peer (its close frame answered), too big (Beast has sent 1009),
  // timed out (no pong), or the socket is gone: the session is over.
  if (ec) return shutdown();
  if (!ws_.got_text()) {
    read_buffer_.clear();
    start_close(ws_close::policy, "binary messages are not accepted: send JSON text");
    return read();  // for the peer's close frame
  }
  std::string message = boost::beast::buffers_to_string(read_buffer_.data());
  read_buffer_.clear();
  if (closing_) return read();
  handler_->on_text(std::move(message));
  read();
}

bool WsSession::send(std::string text) {
  bool over = false;
  {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    if (queued_bytes_ + text.size() > config_.max_queued) {
      closed_ = true;
      over = true;
      queue_.clear();
      drained_.clear();
    } else {
      queued_bytes_ += text.size();
      queue_.push_back(std::move(text));
    }
  }
  if (!over) {
    kick();
    return true;
  }
  // The client does not read what it is sent: cut it off, the queue is dropped.
  post([self = shared_from_this()] {
    self->core_.log("websocket: client disconnected: more than " + std::to_string(self->config_.max_queued) +
                    " bytes waited for it");
    self->shutdown();
  });
  return false;
}

void WsSession::close(std::uint16_t code, std::string reason) {
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    close_after_.emplace(code, std::move(reason));
  }
  kick();
}

bool WsSession::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

void WsSession::kick() {
  {
    std::lock_guard lock(mu_);
    if (std::exchange(scheduled_, true)) return;
  }
  post([self = shared_from_this()] {
    {
      std::lock_guard lock(self->mu_);
      self->scheduled_ = false;
    }
    self->pump();
  });
}

void WsSession::post(std::function<void()> fn) {
  if (core_.stopping.load()) return;
  asio::post(ws_.get_executor(), [self = shared_from_this(), fn = std::move(fn)] {
    if (!self->ended_) fn();
  });
}

bool WsSession::on_strand() const {
  using Strand = asio::strand<asio::io_context::executor_type>;
  auto executor = const_cast<WsSession*>(this)->ws_.get_executor();
  const Strand* strand = executor.target<Strand>();
  return strand && strand->running_in_this_thread();
}

void WsSession::on_drained(std::size_t max_queued, std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    if (closed_ && !close_after_) return;
    if (queued_bytes_ > max_queued) {
      drained_.emplace_back(max_queued, std::move(fn));
      return;
    }
  }
  fn();
}

void WsSession::pump() {
  if (ended_ || !opened_ || writing_ || closing_) return;
  std::optional<std::pair<std::uint16_t, std::string>> close_now;
  {
    std::lock_guard lock(mu_);
    if (!queue_.empty()) {
      out_ = std::move(queue_.front());
      queue_.pop_front();
    } else if (close_after_) {
      close_now = std::move(close_after_);
      close_after_.reset();
    } else {
      return;
    }
  }
  if (close_now) return start_close(close_now->first, std::move(close_now->second));
  writing_ = true;
  ws_.text(true);
  ws_.async_write(asio::buffer(out_), [self = shared_from_this()](error_code ec, std::size_t) { self->on_written(ec); });
}

void WsSession::on_written(error_code ec) {
  writing_ = false;
  std::vector<std::function<void()>> ready;
  {
    std::lock_guard lock(mu_);
    queued_bytes_ -= std::min(queued_bytes_, out_.size());
    std::erase_if(drained_, [&](auto& entry) {
      if (queued_bytes_ > entry.first) return false;
      ready.push_back(std::move(entry.second));
      return true;
    });
  }
  out_.clear();
  if (ec || ended_) return shutdown();
  for (auto& fn : ready) fn();
  pump();
}

void WsSession::start_close(std::uint16_t code, std::string reason) {
  if (closing_ || ended_) return;
  closing_ = true;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    queue_.clear();
    drained_.clear();
  }
  websocket::close_reason why(static_cast<websocket::close_code>(code), reason);
  // The pending read sees the peer's close frame (or Beast's closing timeout) and ends
  // the session.
  ws_.async_close(why, [self = shared_from_this()](error_code ec) {
    if (ec) self->shutdown();
  });
}

void WsSession::shutdown() {
  if (ended_) return;
  ended_ = true;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    queue_.clear();
    drained_.clear();
    close_after_.reset();
  }
  auto handler = std::move(handler_);
  if (opened_ && handler) handler->on_close();
  auto connection = std::move(connection_);
  if (connection) connection->finish();
}

}  // namespace detail

WebSocket::WebSocket(std::weak_ptr<detail::WsSession> session) : session_(std::move(session)) {}

bool WebSocket::send(std::string text) {
  auto s = session_.lock();
  return s && s->send(std::move(text));
}

void WebSocket::close(std::uint16_t code, std::string reason) {
  if (auto s = session_.lock()) s->close(code, std::move(reason));
}

bool WebSocket::closed() const {
  auto s = session_.lock();
  return !s || s->closed();
}

void WebSocket::post(std::function<void()> fn) {
  if (auto s = session_.lock()) s->post(std::move(fn));
}

bool WebSocket::on_strand() const {
  auto s = session_.lock();
  return s && s->on_strand();
}

void WebSocket::on_drained(std::size_t max_queued, std::function<void()> fn) {
  if (auto s = session_.lock()) s->on_drained(max_queued, std::move(fn));
}

}  // namespace cela::api
