// The Connect protocol (connectrpc.com/docs/protocol), as E2B's envd speaks it to the
// SDK: the JSON codec only, unary and server-streaming calls. Every data-plane RPC
// (process.Process, filesystem.Filesystem) goes through here; nothing else of api/e2b
// frames bytes.
//
//   unary      POST application/json, one JSON object each way; errors are non-200
//              {"code": "<connect code>", "message"} (ErrorStyle::connect)
//   streaming  POST application/connect+json holding exactly one envelope; answered
//              200 application/connect+json: data envelopes, then one end-of-stream
//              envelope {} or {"error": {code, message}}
//   envelope   flags (1 byte: 0x01 compressed, refused; 0x02 end of stream), length
//              (4 bytes, big-endian), payload
//
// Headers: Connect-Protocol-Version (when sent, "1"), Connect-Timeout-Ms (the call's
// deadline: a stream still open then ends with deadline_exceeded), and E2B's
// Keepalive-Ping-Interval (seconds: an idle stream sends the service's keepalive
// message at that pace, so proxies and the SDK see it alive).
//
// Threads: a ServerStream may be used from any thread (the session reactor sends
// output, io threads run its timers); it never blocks: a client that falls more than
// the server's stream buffer behind is cut off (api/stream.h).
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "api/http_error.h"
#include "api/request.h"
#include "api/responder.h"
#include "api/router.h"

namespace cela::api::e2b::connect {

inline constexpr std::uint8_t kCompressedFlag = 0x01;
inline constexpr std::uint8_t kEndStreamFlag = 0x02;
inline constexpr std::size_t kEnvelopeHeaderBytes = 5;
// The largest request message taken (an envelope's payload, or a unary body).
inline constexpr std::size_t kMaxRequestBytes = 1024 * 1024;

inline constexpr std::string_view kUnaryContentType = "application/json";
inline constexpr std::string_view kStreamContentType = "application/connect+json";

struct Envelope {
  std::uint8_t flags = 0;
  std::string data;
};

// One envelope's bytes.
std::string encode_envelope(std::uint8_t flags, std::string_view data);

// Splits a byte stream into envelopes, whatever pieces the bytes arrive in.
class EnvelopeReader {
 public:
  explicit EnvelopeReader(std::size_t max_message = kMaxRequestBytes) : max_(max_message) {}
  // Appends bytes. An envelope announcing more than max_message is an error
  // (resource_exhausted), and stays one: the reader takes nothing after it.
  ApiResult<void> feed(std::string_view bytes);
  // The next whole envelope, if one is buffered.
  std::optional<Envelope> next();
  // Nothing buffered: the stream ended between envelopes.
  bool empty() const { return buffer_.empty(); }
  bool failed() const { return failed_; }

 private:
  void check_length();

  std::size_t max_;
  std::string buffer_;
  bool failed_ = false;
};

// The call's Connect headers.
struct CallOptions {
  std::optional<std::chrono::milliseconds> timeout;    // Connect-Timeout-Ms
  std::optional<std::chrono::milliseconds> keepalive;  // Keepalive-Ping-Interval (s)
};
// invalid_argument for a Connect-Protocol-Version other than 1 or a timeout that is
// not 1 to 10 digits.
ApiResult<CallOptions> call_options(const Request& req);

// A JSON object message: invalid_argument when the text is not one.
ApiResult<boost::json::object> parse_message(std::string_view text);
// The request message of a unary call: Content-Type application/json (parameters
// allowed), the body a JSON object; an empty body is the empty message.
ApiResult<boost::json::object> unary_request(const Request& req);
// The request message of a server-streaming call: Content-Type
// application/connect+json, the body exactly one uncompressed data envelope.
ApiResult<boost::json::object> stream_request(const Request& req);

// {"code", "message"}, Connect's error object.
boost::json::object error_json(const ApiError& e);
// The end-of-stream payload: {} when `error` is null, else {"error": error_json}.
std::string end_stream_json(const ApiError* error);

// What every Connect route registers with: its errors, the server's own (401, 413)
// too, in Connect's shape.
RouteOptions route_options();

// A unary answer: 200 application/json.
void reply(Responder& res, const boost::json::value& message);

// The response of a server-streaming call. start() sends the 200 header at once.
class ServerStream : public std::enable_shared_from_this<ServerStream> {
 public:
  // `keepalive_message` (e.g. {"event": {"keepalive": {}}}) is sent whenever the
  // stream has been idle for options.keepalive; null: none. options.timeout arms the
  // deadline: see on_deadline().
  static std::shared_ptr<ServerStream> start(Responder& res, const CallOptions& options,
                                             boost::json::value keepalive_message = nullptr);
  ~ServerStream();
  ServerStream(const ServerStream&) = delete;
  ServerStream& operator=(const ServerStream&) = delete;

  // One data envelope. False when the stream is over (ended, or the client left or
  // fell too far behind).
  bool send(const boost::json::value& message);
  // The end-of-stream envelope {} and the end of the response (the connection stays
  // for the next request).
  void finish();
  // The end-of-stream envelope carrying `error`.
  void fail(const ApiError& error);
  // Cuts the response without an end-of-stream envelope: the client sees the
  // connection drop mid-stream (what E2B's SDK sees when a sandbox dies).
  void drop();
  bool closed() const;
  // Runs once when the response is over for any reason (io thread or the caller's).
  void on_close(std::function<void()> fn);
  // Runs `fn` once at most `max_queued` bytes wait for the client (pacing a replay).
  void on_drained(std::size_t max_queued, std::function<void()> fn);
  // At the deadline (Connect-Timeout-Ms) `fn` runs (once, on an io thread), then the
  // stream fails with deadline_exceeded. Set it right after start().
  void on_deadline(std::function<void()> fn);

  explicit ServerStream(std::shared_ptr<ChunkedWriter> writer, boost::json::value keepalive_message);

 private:
  // Under mu_: writes one envelope unless ended.
  bool write_locked(std::uint8_t flags, std::string_view data);
  void end_locked(const ApiError* error);
  void arm_keepalive(std::chrono::milliseconds interval);
  void deadline_passed();

  mutable std::mutex mu_;
  std::shared_ptr<ChunkedWriter> writer_;
  const boost::json::value keepalive_;
  bool ended_ = false;
  bool sent_since_tick_ = false;
  std::function<void()> on_deadline_;
};

// Answers a streaming call that fails before it starts: 200, then only the
// end-of-stream envelope with `error` (how Connect servers report stream errors).
void fail_stream(Responder& res, const ApiError& error);

}  // namespace cela::api::e2b::connect
