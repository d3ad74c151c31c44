#include "api/e2b/connect.h"

#include <boost/json/parse.hpp>
#include <cctype>
#include <charconv>

#include "common/json_text.h"

namespace cela::api::e2b::connect {
namespace json = boost::json;

namespace {

// "application/json; charset=utf-8" -> "application/json", lower case.
std::string media_type(std::string_view content_type) {
  std::string_view base = content_type.substr(0, content_type.find(';'));
  while (!base.empty() && base.back() == ' ') base.remove_suffix(1);
  while (!base.empty() && base.front() == ' ') base.remove_prefix(1);
  std::string out(base);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

ApiResult<void> require_content_type(const Request& req, std::string_view want) {
  auto type = req.header("Content-Type");
  if (!type || media_type(*type) != want)
    return api_fail(ApiError::unsupported_media_type("Content-Type must be " + std::string(want)));
  return {};
}

std::optional<uint64_t> digits(std::string_view text, std::size_t max_digits) {
  if (text.empty() || text.size() > max_digits) return std::nullopt;
  uint64_t v = 0;
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (r.ec != std::errc() || r.ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

ApiError deadline_exceeded() {
  ApiError e = ApiError::request_timeout("the call's deadline (Connect-Timeout-Ms) passed");
  e.wire_code = "deadline_exceeded";
  return e;
}

}  // namespace

std::string encode_envelope(std::uint8_t flags, std::string_view data) {
  std::string out;
  out.reserve(kEnvelopeHeaderBytes + data.size());
  auto n = static_cast<uint32_t>(data.size());
  out.push_back(static_cast<char>(flags));
  out.push_back(static_cast<char>((n >> 24) & 0xff));
  out.push_back(static_cast<char>((n >> 16) & 0xff));
  out.push_back(static_cast<char>((n >> 8) & 0xff));
  out.push_back(static_cast<char>(n & 0xff));
  out.append(data);
  return out;
}

namespace {
uint32_t announced_length(const std::string& buffer) {
  auto b = [&](std::size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(buffer[i])); };
  return (b(1) << 24) | (b(2) << 16) | (b(3) << 8) | b(4);
}
}  // namespace

ApiResult<void> EnvelopeReader::feed(std::string_view bytes) {
  if (!failed_) buffer_.append(bytes);
  check_length();
  if (failed_) return api_fail(ApiError::payload_too_large("message larger than " + std::to_string(max_) + " bytes"));
  return {};
}

void EnvelopeReader::check_length() {
  if (failed_ || buffer_.size() < kEnvelopeHeaderBytes) return;
  if (announced_length(buffer_) > max_) {
    failed_ = true;
    buffer_.clear();
  }
}

std::optional<Envelope> EnvelopeReader::next() {
  if (failed_ || buffer_.size() < kEnvelopeHeaderBytes) return std::nullopt;
  uint32_t n = announced_length(buffer_);
  if (buffer_.size() < kEnvelopeHeaderBytes + n) return std::nullopt;
  Envelope e;
  e.flags = static_cast<std::uint8_t>(buffer_[0]);
  e.data = buffer_.substr(kEnvelopeHeaderBytes, n);
  buffer_.erase(0, kEnvelopeHeaderBytes + n);
  check_length();  // the next envelope's header may be here already
  return e;
}

ApiResult<CallOptions> call_options(const Request& req) {
  CallOptions o;
  if (auto v = req.header("Connect-Protocol-Version"); v && *v != "1")
    return api_fail(ApiError::invalid_request("Connect-Protocol-Version must be 1"));
  if (auto t = req.header("Connect-Timeout-Ms")) {
    // The protocol allows at most 10 digits.
    auto ms = digits(*t, 10);
    if (!ms) return api_fail(ApiError::invalid_request("Connect-Timeout-Ms must be 1 to 10 digits"));
    o.timeout = std::chrono::milliseconds(*ms);
  }
  if (auto k = req.header("Keepalive-Ping-Interval")) {
    auto s = digits(*k, 6);
    if (!s) return api_fail(ApiError::invalid_request("Keepalive-Ping-Interval must be a whole number of seconds"));
    if (*s > 0) o.keepalive = std::chrono::seconds(*s);
  }
  return o;
}

ApiResult<json::object> parse_message(std::string_view text) {
  boost::system::error_code ec;
  json::value v = json::parse(text, ec);
  if (ec) return api_fail(ApiError::invalid_request("the message is not valid JSON: " + ec.message()));
  if (!v.is_object()) return api_fail(ApiError::invalid_request("the message must be a JSON object"));
  return std::move(v.as_object());
}

ApiResult<json::object> unary_request(const Request& req) {
  if (auto ok = require_content_type(req, kUnaryContentType); !ok) return api_fail(ok.error());
  if (req.body.empty()) return json::object{};
  return parse_message(req.body);
}

ApiResult<json::object> stream_request(const Request& req) {
  if (auto ok = require_content_type(req, kStreamContentType); !ok) return api_fail(ok.error());
  EnvelopeReader reader;
  if (auto fed = reader.feed(req.body); !fed) return api_fail(fed.error());
  auto first = reader.next();
  if (!first) return api_fail(ApiError::invalid_request("the request must hold one whole envelope"));
  if (first->flags & kCompressedFlag)
    return api_fail(ApiError::invalid_request("compressed messages are not supported"));
  if (first->flags != 0) return api_fail(ApiError::invalid_request("the request envelope must be a data message"));
  if (!reader.empty()) return api_fail(ApiError::invalid_request("a server-streaming request holds exactly one message"));
  return parse_message(first->data);
}

json::object error_json(const ApiError& e) {
  return {{"code", connect_code(e)}, {"message", e.message}};
}

std::string end_stream_json(const ApiError* error) {
  if (!error) return "{}";
  return json_text(json::object{{"error", error_json(*error)}});
}

RouteOptions route_options() {
  return RouteOptions().with_error_style(ErrorStyle::connect).with_body_limit(kMaxRequestBytes + kEnvelopeHeaderBytes);
}

void reply(Responder& res, const json::value& message) {
  res.json(200, message);
}

// ---- ServerStream

ServerStream::ServerStream(std::shared_ptr<ChunkedWriter> writer, json::value keepalive_message)
    : writer_(std::move(writer)), keepalive_(std::move(keepalive_message)) {}

// A stream nobody ended is cut (the writer's destructor aborts it): its client must
// not take a missing end for a complete answer.
ServerStream::~ServerStream() = default;

std::shared_ptr<ServerStream> ServerStream::start(Responder& res, const CallOptions& options,
                                                  json::value keepalive_message) {
  auto writer = res.start_chunked(200, kStreamContentType);
  auto stream = std::make_shared<ServerStream>(std::move(writer), std::move(keepalive_message));
  if (options.keepalive && !stream->keepalive_.is_null()) stream->arm_keepalive(*options.keepalive);
  if (options.timeout) {
    std::weak_ptr<ServerStream> weak = stream;
    stream->writer_->after(*options.timeout, [weak] {
      if (auto s = weak.lock()) s->deadline_passed();
    });
  }
  return stream;
}

bool ServerStream::write_locked(std::uint8_t flags, std::string_view data) {
  if (ended_) return false;
  sent_since_tick_ = true;
  return writer_->try_write(encode_envelope(flags, data));
}

void ServerStream::end_locked(const ApiError* error) {
  ended_ = true;
  writer_->try_write(encode_envelope(kEndStreamFlag, end_stream_json(error)));
  writer_->finish();
}

bool ServerStream::send(const json::value& message) {
  std::lock_guard lock(mu_);
  return write_locked(0, json_text(message));
}

void ServerStream::finish() {
  std::lock_guard lock(mu_);
  if (!ended_) end_locked(nullptr);
}

void ServerStream::fail(const ApiError& error) {
  std::lock_guard lock(mu_);
  if (!ended_) end_locked(&error);
}

void ServerStream::drop() {
  std::lock_guard lock(mu_);
  ended_ = true;
  writer_->abort();
}

bool ServerStream::closed() const {
  std::lock_guard lock(mu_);
  return ended_ || writer_->closed();
}

void ServerStream::on_close(std::function<void()> fn) {
  writer_->on_close(std::move(fn));
}

void ServerStream::on_drained(std::size_t max_queued, std::function<void()> fn) {
  writer_->on_drained(max_queued, std::move(fn));
}

void ServerStream::on_deadline(std::function<void()> fn) {
  std::lock_guard lock(mu_);
  on_deadline_ = std::move(fn);
}

void ServerStream::arm_keepalive(std::chrono::milliseconds interval) {
  std::weak_ptr<ServerStream> weak = weak_from_this();
  writer_->after(interval, [weak, interval] {
    auto s = weak.lock();
    if (!s) return;
    {
      std::lock_guard lock(s->mu_);
      if (s->ended_) return;
      // Only an idle stream needs the ping.
      if (!std::exchange(s->sent_since_tick_, false)) {
        if (!s->write_locked(0, json_text(s->keepalive_))) return;
        s->sent_since_tick_ = false;
      }
    }
    s->arm_keepalive(interval);
  });
}

void ServerStream::deadline_passed() {
  std::function<void()> fn;
  {
    std::lock_guard lock(mu_);
    if (ended_) return;
    fn = std::move(on_deadline_);
  }
  if (fn) fn();
  fail(deadline_exceeded());
}

void fail_stream(Responder& res, const ApiError& error) {
  ServerStream::start(res, CallOptions{})->fail(error);
}

}  // namespace cela::api::e2b::connect
