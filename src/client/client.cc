#include "client/client.h"

#include <strings.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/detail/base64.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstdlib>

#include "common/encoding.h"

namespace cela::client {
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace json = boost::json;

namespace {

std::string env_or(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

ErrorCode code_from_wire(std::string_view c) {
  if (c == "invalid_request") return ErrorCode::invalid_argument;
  if (c == "unauthorized" || c == "forbidden") return ErrorCode::permission_denied;
  if (c == "policy_denied") return ErrorCode::policy_denied;
  if (c == "not_found") return ErrorCode::not_found;
  if (c == "conflict") return ErrorCode::conflict;
  if (c == "gone") return ErrorCode::gone;
  if (c == "payload_too_large") return ErrorCode::limit;
  if (c == "quota_exceeded" || c == "rate_limited") return ErrorCode::quota_exceeded;
  if (c == "capacity_exceeded") return ErrorCode::capacity_exceeded;
  return ErrorCode::internal;
}

// A non-2xx answer as an Error: the server's {"error": {...}} when it sent one.
Error error_from(unsigned status, std::string_view body) {
  boost::system::error_code ec;
  json::value v = json::parse(body, ec);
  if (!ec && v.is_object()) {
    if (auto* e = v.as_object().if_contains("error"); e && e->is_object()) {
      const auto& eo = e->as_object();
      std::string code, msg;
      if (auto* c = eo.if_contains("code"); c && c->is_string()) code = c->as_string();
      if (auto* m = eo.if_contains("message"); m && m->is_string()) msg = m->as_string();
      if (msg.empty()) msg = code;
      return Error{code_from_wire(code), 0, msg + (code.empty() ? "" : " (" + code + ")")};
    }
  }
  std::string text(body.substr(0, 200));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  ErrorCode code = status == 404 ? ErrorCode::not_found : status == 410 ? ErrorCode::gone : ErrorCode::internal;
  return Error{code, 0, "HTTP " + std::to_string(status) + (text.empty() ? "" : ": " + text)};
}

http::request<http::string_body> make_request(std::string_view method, std::string_view target, std::string_view body,
                                              const Headers& headers, const std::string& host, const std::string& key) {
  http::request<http::string_body> req;
  req.method_string(method);
  req.target(target);
  req.version(11);
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "cela-cli/0.1");
  if (!key.empty()) req.set(http::field::authorization, "Bearer " + key);
  for (auto& [k, v] : headers) req.set(k, v);
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    req.body() = std::string(body);
    req.prepare_payload();
  }
  return req;
}

}  // namespace

std::string Response::header(std::string_view name) const {
  for (auto& [k, v] : headers)
    if (k.size() == name.size() && ::strncasecmp(k.data(), name.data(), k.size()) == 0) return v;
  return {};
}

std::string url_encode(std::string_view s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

Result<std::string> base64_decode(std::string_view in) {
  auto out = cela::base64_decode(in);
  if (!out) return fail(ErrorCode::invalid_argument, "bad base64 from the server");
  return std::move(*out);
}

bool SseParser::feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event) {
  pending_.append(bytes);
  size_t start = 0;
  for (;;) {
    size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view l(pending_.data() + start, nl - start);
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    start = nl + 1;
    if (!line(l, on_event)) {
      pending_.erase(0, start);
      return false;
    }
  }
  pending_.erase(0, start);
  return true;
}

bool SseParser::line(std::string_view l, const std::function<bool(const SseEvent&)>& on_event) {
  if (l.empty()) {  // dispatch
    // Only now is the id the stream's: a stream cut between an event's `id:` line and
    // its end must resume before that event, not after it (no chunk lost).
    last_id_ = id_buffer_;
    if (!has_data_ && event_.empty()) return true;
    SseEvent ev;
    if (!event_.empty()) ev.event = std::move(event_);
    ev.data = std::move(data_);
    ev.id = last_id_;
    event_.clear();
    data_.clear();
    has_data_ = false;
    return on_event(ev);
  }
  if (l.front() == ':') return true;  // comment (keep-alive)
  auto colon = l.find(':');
  std::string_view field = l.substr(0, colon), value;
  if (colon != std::string_view::npos) {
    value = l.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "event") {
    event_ = value;
  } else if (field == "data") {
    if (has_data_) data_ += '\n';
    data_ += value;
    has_data_ = true;
  } else if (field == "id") {
    id_buffer_ = value;
  }
  return true;
}

Result<Client> Client::make(std::string url, std::string api_key) {
  if (url.empty()) url = env_or("CELA_URL");
  if (url.empty()) url = kDefaultUrl;
  if (api_key.empty()) api_key = env_or("CELA_API_KEY");
  Client c;
  c.url_ = url;
  c.key_ = api_key;
  if (url.starts_with("unix://")) {
    c.unix_ = true;
    c.path_ = url.substr(7);
    if (c.path_.empty()) return fail(ErrorCode::invalid_argument, "bad url '" + url + "' (want unix:///path/to.sock)");
    return c;
  }
  if (url.starts_with("http://")) {
    c.unix_ = false;
    std::string hostport = url.substr(7);
    if (auto slash = hostport.find('/'); slash != std::string::npos) hostport.resize(slash);
    auto colon = hostport.rfind(':');
    if (colon != std::string::npos && hostport.find(']', colon) == std::string::npos) {
      c.host_ = hostport.substr(0, colon);
      c.port_ = hostport.substr(colon + 1);
    } else {
      c.host_ = hostport;
      c.port_ = "80";
    }
    if (c.host_.size() > 1 && c.host_.front() == '[' && c.host_.back() == ']') c.host_ = c.host_.substr(1, c.host_.size() - 2);
    if (c.host_.empty() || c.port_.empty()) return fail(ErrorCode::invalid_argument, "bad url '" + url + "'");
    return c;
  }
  return fail(ErrorCode::invalid_argument, "bad url '" + url + "' (want unix:///path or http://host:port)");
}

namespace {

// Connects to the daemon and hands the stream to f (which returns a Result<T>).
template <class F>
auto with_stream(bool unix_socket, const std::string& path, const std::string& host, const std::string& port,
                 const std::string& url, F&& f) -> decltype(f(std::declval<asio::ip::tcp::socket&>())) {
  asio::io_context io;
  boost::system::error_code ec;
  if (unix_socket) {
    asio::local::stream_protocol::socket s(io);
    s.connect(asio::local::stream_protocol::endpoint(path), ec);
    if (ec) return fail(ErrorCode::system, "cannot connect to " + url + ": " + ec.message() + " (is `cela serve` running?)");
    return f(s);
  }
  asio::ip::tcp::resolver resolver(io);
  auto results = resolver.resolve(host, port, ec);
  if (ec) return fail(ErrorCode::system, "cannot resolve " + url + ": " + ec.message());
  asio::ip::tcp::socket s(io);
  asio::connect(s, results, ec);
  if (ec) return fail(ErrorCode::system, "cannot connect to " + url + ": " + ec.message() + " (is `cela serve` running?)");
  return f(s);
}

}  // namespace

Result<Response> Client::request(std::string_view method, std::string_view target, std::string_view body,
                                 const Headers& headers) const {
  auto req = make_request(method, target, body, headers, unix_ ? "localhost" : host_, key_);
  return with_stream(unix_, path_, host_, port_, url_, [&](auto& s) -> Result<Response> {
    boost::system::error_code ec;
    http::write(s, req, ec);
    if (ec) return fail(ErrorCode::system, "send to " + url_ + ": " + ec.message());
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    // A HEAD answer carries the headers of a GET, Content-Length included, and no body.
    if (method == "HEAD") parser.skip(true);
    http::read(s, buf, parser, ec);
    if (ec) return fail(ErrorCode::system, "read from " + url_ + ": " + ec.message());
    auto& msg = parser.get();
    Response r;
    r.status = msg.result_int();
    r.body = std::move(msg.body());
    for (auto& h : msg) r.headers.emplace_back(std::string(h.name_string()), std::string(h.value()));
    if (r.status < 200 || r.status >= 300) return std::unexpected(error_from(r.status, r.body));
    return r;
  });
}

Result<json::object> Client::json(std::string_view method, std::string_view target, const json::value& body) const {
  Headers h;
  std::string text;
  if (!body.is_null()) {
    text = json::serialize(body);
    h.emplace_back("Content-Type", "application/json");
  }
  auto r = request(method, target, text, h);
  if (!r) return std::unexpected(r.error());
  boost::system::error_code ec;
  json::value v = json::parse(r->body, ec);
  if (ec || !v.is_object()) return fail(ErrorCode::internal, "the server answered " + std::string(target) + " with no JSON object");
  return std::move(v.as_object());
}

Result<void> Client::follow(std::string_view target, std::string& last_event_id,
                            const std::function<bool(const SseEvent&)>& on_event) const {
  Headers h{{"Accept", "text/event-stream"}};
  if (!last_event_id.empty()) h.emplace_back("Last-Event-ID", last_event_id);
  auto req = make_request("GET", target, {}, h, unix_ ? "localhost" : host_, key_);
  return with_stream(unix_, path_, host_, port_, url_, [&](auto& s) -> Result<void> {
    boost::system::error_code ec;
    http::write(s, req, ec);
    if (ec) return fail(ErrorCode::system, "send to " + url_ + ": " + ec.message());
    beast::flat_buffer buf;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    http::read_header(s, buf, parser, ec);
    if (ec) return fail(ErrorCode::system, "read from " + url_ + ": " + ec.message());
    unsigned status = parser.get().result_int();
    bool ok = status >= 200 && status < 300;
    SseParser sse;
    sse.set_last_id(last_event_id);
    std::string error_body;
    char chunk[16384];
    while (!parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof chunk;
      http::read_some(s, buf, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      size_t n = sizeof chunk - parser.get().body().size;
      if (ok) {
        bool go_on = sse.feed(std::string_view(chunk, n), on_event);
        last_event_id = sse.last_id();
        if (!go_on) return {};
      } else {
        error_body.append(chunk, n);
      }
      if (ec) {
        if (!ok) break;
        return fail(ErrorCode::system, "event stream from " + url_ + " broke: " + ec.message());
      }
    }
    if (!ok) return std::unexpected(error_from(status, error_body));
    return {};
  });
}

}  // namespace cela::client
