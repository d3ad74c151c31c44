#include "api/port_proxy.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/write.hpp>
#include <array>
#include <limits>
#include <optional>
#include <vector>

namespace cela::api {
namespace {
namespace asio = boost::asio;
namespace beast = boost::beast;
using boost::system::error_code;
using tcp = asio::ip::tcp;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
constexpr std::uint32_t kResponseHeaderLimit = 64 * 1024;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The comma-separated tokens of every Connection field.
std::vector<std::string> connection_tokens(const http::fields& f) {
  std::vector<std::string> out;
  for (auto it = f.find(http::field::connection); it != f.end() && it->name() == http::field::connection; ++it) {
    std::string_view v = it->value();
    while (!v.empty()) {
      auto comma = v.find(',');
      std::string_view token = trim(v.substr(0, comma));
      if (!token.empty()) out.emplace_back(token);
      if (comma == std::string_view::npos) break;
      v.remove_prefix(comma + 1);
    }
  }
  return out;
}

// RFC 9110 section 7.6.1: fields meant for the next hop only.
void drop_hop_by_hop(http::fields& f) {
  for (const std::string& token : connection_tokens(f)) f.erase(token);
  for (auto field : {http::field::connection, http::field::keep_alive, http::field::proxy_connection, http::field::te,
                     http::field::trailer, http::field::transfer_encoding, http::field::upgrade,
                     http::field::proxy_authorization, http::field::proxy_authenticate})
    f.erase(field);
}

class PortRelay final : public Relay, public std::enable_shared_from_this<PortRelay> {
 public:
  PortRelay(UniqueFd socket, std::shared_ptr<void> lease, ProxiedRequest request, PortRelayOptions options)
      : fd_(std::move(socket)), lease_(std::move(lease)), req_(std::move(request)), options_(options) {}

  void start(RelayRequest client, std::function<void(RelayEnd)> done) override {
    client_.emplace(std::move(client));
    done_ = std::move(done);
    auto ex = client_->socket.get_executor();
    upstream_.emplace(ex);
    timer_.emplace(ex);
    error_code ec;
    upstream_->assign(tcp::v4(), fd_.release(), ec);
    if (ec) return finish(RelayEnd{.error = ApiError::internal("port proxy: adopt the session's socket: " + ec.message())});
    deadline_ = Clock::now() + options_.connect_timeout;
    asio::co_spawn(ex, watch(shared_from_this()), asio::detached);
    asio::co_spawn(ex, serve(shared_from_this()), [self = shared_from_this()](std::exception_ptr e) {
      if (e) self->finish(RelayEnd{});  // a bug: the connection closes
    });
  }

  void abort() override {
    aborted_ = true;
    done_ = nullptr;
    cut();
  }

 private:
  void finish(RelayEnd end) {
    if (finished_) return;
    finished_ = true;
    if (timer_) timer_->cancel();
    error_code ignored;
    if (upstream_) upstream_->close(ignored);
    lease_.reset();
    if (auto done = std::exchange(done_, nullptr); done && !aborted_) done(std::move(end));
    // Nothing touches the client side any more: let the connection go (it holds us).
    if (client_) client_->owner.reset();
  }

  // Ends whatever is in flight on both sides (idle timeout, abort).
  void cut() {
    error_code ignored;
    if (upstream_) upstream_->close(ignored);
    if (client_ && !aborted_) client_->socket.cancel(ignored);
    if (timer_) timer_->cancel();
  }

  void touch() { deadline_ = Clock::now() + options_.idle_timeout; }

  // `keep` holds the relay for as long as the coroutine runs.
  asio::awaitable<void> watch(std::shared_ptr<PortRelay> keep) {
    (void)keep;
    while (!finished_ && !aborted_) {
      timer_->expires_at(deadline_);
      co_await timer_->async_wait(use_tuple);
      if (finished_ || aborted_) co_return;
      if (Clock::now() >= deadline_) {
        timed_out_ = true;
        cut();
        co_return;
      }
    }
  }

  asio::awaitable<void> serve(std::shared_ptr<PortRelay> keep) {
    (void)keep;
    RelayEnd end = co_await exchange();
    finish(std::move(end));
  }

  std::string where() const { return "port " + std::to_string(req_.port) + " inside the session"; }
  ApiError bad_gateway(const std::string& why) const { return ApiError::bad_gateway(why).with_session(req_.session_id); }

  asio::awaitable<RelayEnd> exchange() {
    RelayRequest& c = *client_;
    auto [cec] = co_await upstream_->async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), req_.port), use_tuple);
    if (cec) {
      if (timed_out_)
        co_return RelayEnd{.error = bad_gateway("no connection to " + where() + " within " +
                                                std::to_string(options_.connect_timeout.count()) + " ms")};
      if (cec == asio::error::connection_refused)
        co_return RelayEnd{.error = bad_gateway("nothing listens on 127.0.0.1:" + std::to_string(req_.port) +
                                                " inside the session (connection refused)")};
      co_return RelayEnd{.error = bad_gateway("could not connect to " + where() + ": " + cec.message())};
    }
    touch();
    // Requests and answers go out as they come (a header alone must not wait for an ACK).
    error_code ignored;
    upstream_->set_option(tcp::no_delay(true), ignored);

    bool websocket = !c.body && is_websocket_upgrade(req_.headers);
    http::request<http::buffer_body> up;
    static_cast<http::fields&>(up) = upstream_request_fields(req_.headers, req_.port, req_.prefix, websocket);
    up.method_string(req_.method);
    up.target(req_.target);
    up.version(11);
    if (c.body) {
      if (auto length = c.body->content_length()) up.content_length(*length);
      else up.chunked(true);
    }
    up.body().data = nullptr;
    up.body().size = 0;
    up.body().more = c.body != nullptr;
    http::request_serializer<http::buffer_body> sr{up};
    auto [hec, hn] = co_await http::async_write_header(*upstream_, sr, use_tuple);
    if (hec) co_return RelayEnd{.error = bad_gateway("the server on " + where() + " closed the connection")};
    touch();

    bool request_done = true, upstream_stopped = false;
    if (c.body) {
      request_done = false;
      if (c.expect_continue) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        auto [ec, n] = co_await asio::async_write(c.socket, asio::buffer(kContinue), use_tuple);
        if (ec) co_return RelayEnd{};
      }
      for (;;) {
        auto& b = c.body->get().body();
        b.data = in_.data();
        b.size = in_.size();
        auto [rec, rn] = co_await http::async_read(c.socket, c.buffer, *c.body, use_tuple);
        if (rec == http::error::need_buffer) rec = {};
        if (rec) {
          if (timed_out_) co_return RelayEnd{.error = ApiError::request_timeout("request body stalled")};
          if (rec.category() == http::make_error_code(http::error::bad_method).category() &&
              rec != http::error::partial_message)
            co_return RelayEnd{.error = ApiError::invalid_request("malformed request body: " + rec.message())};
          co_return RelayEnd{};  // the client went away
        }
        touch();
        up.body().data = in_.data();
        up.body().size = in_.size() - b.size;
        up.body().more = !c.body->is_done();
        auto [wec, wn] = co_await http::async_write(*upstream_, sr, use_tuple);
        if (wec == http::error::need_buffer) wec = {};
        if (wec) {
          // The server stopped reading: its answer (a 413, say) may already be there.
          upstream_stopped = true;
          break;
        }
        touch();
        if (c.body->is_done()) {
          request_done = true;
          break;
        }
      }
    }

    std::optional<http::response_parser<http::buffer_body>> rp;
    for (;;) {
      rp.emplace();
      rp->header_limit(kResponseHeaderLimit);
      rp->body_limit(std::numeric_limits<std::uint64_t>::max());
      if (c.head) rp->skip(true);
      auto [rec, rn] = co_await http::async_read_header(*upstream_, up_buffer_, *rp, use_tuple);
      if (rec) {
        if (timed_out_) co_return RelayEnd{.error = bad_gateway("the server on " + where() + " did not answer within " +
                                                                std::to_string(options_.idle_timeout.count()) + " ms")};
        co_return RelayEnd{.error = bad_gateway("the server on " + where() + " gave no valid answer: " + rec.message())};
      }
      touch();
      unsigned st = rp->get().result_int();
      if (st >= 200 || st == 101) break;  // interim answers (100, 103) are not relayed
    }
    const auto& head = rp->get();
    unsigned status = head.result_int();

    if (status == 101) {
      if (!websocket) co_return RelayEnd{.error = bad_gateway("the server on " + where() + " switched protocols unasked")};
      http::response<http::empty_body> out;
      static_cast<http::fields&>(out) = client_response_fields(head);
      out.result(http::status::switching_protocols);
      out.version(c.version);
      out.set(http::field::connection, "Upgrade");
      out.set(http::field::upgrade, head[http::field::upgrade]);
      auto [wec, wn] = co_await http::async_write(c.socket, out, use_tuple);
      if (wec) co_return RelayEnd{101, false, std::nullopt};
      touch();
      co_await (pump_to_upstream() && pump_to_client());
      co_return RelayEnd{101, false, std::nullopt};
    }

    http::response<http::buffer_body> out;
    static_cast<http::fields&>(out) = client_response_fields(head);
    out.result(status);
    out.reason(head.reason());
    out.version(c.version);
    bool has_body = !(status < 200 || status == 204 || status == 304) && !c.head;
    bool framed = true;
    if (c.head) {
      if (auto it = head.find(http::field::content_length); it != head.end()) out.set(http::field::content_length, it->value());
    } else if (auto length = rp->content_length(); length && has_body) {
      out.content_length(*length);
    } else if (has_body) {
      if (c.version >= 11) out.chunked(true);
      else framed = false;  // HTTP/1.0: the body ends with the connection
    }
    bool reuse = c.keep_alive && request_done && !upstream_stopped && framed;
    out.keep_alive(reuse);
    out.set("X-Request-Id", c.request_id);
    out.body().data = nullptr;
    out.body().size = 0;
    out.body().more = has_body && !rp->is_done();
    http::response_serializer<http::buffer_body> osr{out};
    auto [wec, wn] = co_await http::async_write_header(c.socket, osr, use_tuple);
    if (wec) co_return RelayEnd{static_cast<int>(status), false, std::nullopt};
    touch();
    if (has_body && !rp->is_done()) {
      for (;;) {
        auto& b = rp->get().body();
        b.data = out_.data();
        b.size = out_.size();
        // read_some: what the server sent so far goes out now (a stream of lines, SSE),
        // not once the relay buffer is full.
        auto [rec, rn] = co_await http::async_read_some(*upstream_, up_buffer_, *rp, use_tuple);
        if (rec == http::error::need_buffer) rec = {};
        // A body cut short inside cannot be mended: the client's answer ends unfinished.
        if (rec) co_return RelayEnd{static_cast<int>(status), false, std::nullopt};
        touch();
        out.body().data = out_.data();
        out.body().size = out_.size() - b.size;
        out.body().more = !rp->is_done();
        // A read that parsed only framing (a chunk header) has nothing to pass on: an
        // empty write would end the chunked answer early.
        if (out.body().size == 0 && out.body().more) continue;
        auto [cec2, cn] = co_await http::async_write(c.socket, osr, use_tuple);
        if (cec2 == http::error::need_buffer) cec2 = {};
        if (cec2) co_return RelayEnd{static_cast<int>(status), false, std::nullopt};
        touch();
        if (rp->is_done()) break;
      }
    }
    co_return RelayEnd{static_cast<int>(status), reuse, std::nullopt};
  }

  // After a 101: raw bytes each way, starting with what either side sent past its header.
  asio::awaitable<void> pump_to_upstream() {
    RelayRequest& c = *client_;
    error_code ec;
    if (c.buffer.size()) {
      std::tie(ec, std::ignore) = co_await asio::async_write(*upstream_, c.buffer.data(), use_tuple);
      c.buffer.consume(c.buffer.size());
    }
    while (!ec) {
      auto [rec, n] = co_await c.socket.async_read_some(asio::buffer(in_), use_tuple);
      if (rec) break;
      touch();
      std::tie(ec, std::ignore) = co_await asio::async_write(*upstream_, asio::buffer(in_.data(), n), use_tuple);
      touch();
    }
    error_code ignored;
    if (upstream_->is_open()) upstream_->shutdown(tcp::socket::shutdown_send, ignored);
  }

  asio::awaitable<void> pump_to_client() {
    RelayRequest& c = *client_;
    error_code ec;
    if (up_buffer_.size()) {
      std::tie(ec, std::ignore) = co_await asio::async_write(c.socket, up_buffer_.data(), use_tuple);
      up_buffer_.consume(up_buffer_.size());
    }
    while (!ec) {
      auto [rec, n] = co_await upstream_->async_read_some(asio::buffer(out_), use_tuple);
      if (rec) break;
      touch();
      std::tie(ec, std::ignore) = co_await asio::async_write(c.socket, asio::buffer(out_.data(), n), use_tuple);
      touch();
    }
    error_code ignored;
    if (!aborted_) c.socket.shutdown(asio::socket_base::shutdown_send, ignored);
  }

  UniqueFd fd_;
  std::shared_ptr<void> lease_;  // the session's count of open proxied connections
  ProxiedRequest req_;
  PortRelayOptions options_;
  std::optional<RelayRequest> client_;
  std::function<void(RelayEnd)> done_;
  std::optional<tcp::socket> upstream_;
  std::optional<asio::steady_timer> timer_;
  beast::flat_buffer up_buffer_;
  std::array<char, kRelayChunkBytes> in_{}, out_{};
  Clock::time_point deadline_;
  bool finished_ = false, aborted_ = false, timed_out_ = false;
};

}  // namespace

ApiResult<std::string> proxied_target(std::string_view raw_target, std::size_t skip) {
  auto q = raw_target.find('?');
  std::string_view path = raw_target.substr(0, q);
  std::string_view query = q == std::string_view::npos ? std::string_view() : raw_target.substr(q);
  if (path.empty() || path.front() != '/') return api_fail(ApiError::invalid_request("malformed request target"));
  size_t pos = 0;
  for (std::size_t i = 0; i < skip; ++i) {
    if (pos >= path.size() || path[pos] != '/') return api_fail(ApiError::invalid_request("malformed request target"));
    pos = path.find('/', pos + 1);
    if (pos == std::string_view::npos) {
      if (i + 1 < skip) return api_fail(ApiError::invalid_request("malformed request target"));
      pos = path.size();
    }
  }
  std::string out(path.substr(pos));
  if (out.empty()) out = "/";
  out += query;
  return out;
}

bool is_websocket_upgrade(const http::fields& fields) {
  if (!beast::iequals(fields[http::field::upgrade], "websocket")) return false;
  for (const std::string& token : connection_tokens(fields))
    if (beast::iequals(token, "upgrade")) return true;
  return false;
}

http::fields upstream_request_fields(const http::fields& client, uint16_t port, std::string_view prefix,
                                     bool websocket) {
  http::fields f = client;
  drop_hop_by_hop(f);
  // The daemon's key is for the daemon; the sandbox never sees it.
  f.erase(http::field::authorization);
  f.erase(http::field::expect);  // answered by the proxy itself
  f.erase(http::field::content_length);
  f.erase(http::field::host);
  f.erase("X-Forwarded-Host");
  f.erase("X-Forwarded-Prefix");
  if (auto host = client[http::field::host]; !host.empty()) f.set("X-Forwarded-Host", host);
  f.set("X-Forwarded-Prefix", prefix);
  f.set(http::field::host, "127.0.0.1:" + std::to_string(port));
  if (websocket) {
    f.set(http::field::connection, "Upgrade");
    f.set(http::field::upgrade, "websocket");
  } else {
    f.set(http::field::connection, "close");
  }
  return f;
}

http::fields client_response_fields(const http::fields& server) {
  http::fields f = server;
  drop_hop_by_hop(f);
  f.erase(http::field::content_length);
  return f;
}

std::shared_ptr<Relay> make_port_relay(UniqueFd socket, std::shared_ptr<void> lease, ProxiedRequest request,
                                       PortRelayOptions options) {
  return std::make_shared<PortRelay>(std::move(socket), std::move(lease), std::move(request), options);
}

}  // namespace cela::api
