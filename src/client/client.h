// A synchronous HTTP/1.1 client for the cela daemon (API.md): over the local unix
// socket (root, no key) or TCP with `Authorization: Bearer <key>`, plus a reader for
// the daemon's server-sent event streams. Used by the client subcommands of the CLI.
#pragma once

#include <boost/json.hpp>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace cela::client {

inline constexpr std::string_view kDefaultUrl = "unix:///run/cela/cela.sock";

struct Response {
  unsigned status = 0;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;

  // The first header of that name (case-insensitive), or "".
  std::string header(std::string_view name) const;
};

struct SseEvent {
  std::string event = "message";
  std::string id;    // the stream's last event id after this event
  std::string data;  // data lines joined with '\n'
};

using Headers = std::vector<std::pair<std::string, std::string>>;

class Client {
 public:
  // url: "unix:///path/to.sock" or "http://host[:port]". Empty url/key: CELA_URL /
  // CELA_API_KEY from the environment, else the default unix socket and no key.
  static Result<Client> make(std::string url = {}, std::string api_key = {});

  // One request. A non-2xx answer becomes an Error carrying the server's message
  // (its code mapped to an ErrorCode).
  Result<Response> request(std::string_view method, std::string_view target, std::string_view body = {},
                           const Headers& headers = {}) const;

  // request() with a JSON body (null: none) whose answer is a JSON object.
  Result<boost::json::object> json(std::string_view method, std::string_view target,
                                   const boost::json::value& body = nullptr) const;

  // Reads the SSE stream at target, calling on_event for each event until it returns
  // false or the server ends the stream. last_event_id is sent as Last-Event-ID when
  // not empty and is updated as events with an id arrive (for resuming).
  Result<void> follow(std::string_view target, std::string& last_event_id,
                      const std::function<bool(const SseEvent&)>& on_event) const;

  const std::string& url() const { return url_; }

 private:
  std::string url_, key_;
  bool unix_ = true;
  std::string path_;  // unix socket path
  std::string host_, port_;
};

// Percent-encodes a query value.
std::string url_encode(std::string_view s);

// Base64 decode (the daemon's SSE output chunks and base64-encoded outputs).
Result<std::string> base64_decode(std::string_view in);

// Incremental SSE parser: feed() bytes, get complete events.
class SseParser {
 public:
  // Returns false when a callback asked to stop.
  bool feed(std::string_view bytes, const std::function<bool(const SseEvent&)>& on_event);
  // The id of the last complete event (what to resume from), not of one still being
  // received.
  const std::string& last_id() const { return last_id_; }
  void set_last_id(std::string id) { last_id_ = id_buffer_ = std::move(id); }

 private:
  bool line(std::string_view l, const std::function<bool(const SseEvent&)>& on_event);
  std::string pending_, event_, data_, last_id_, id_buffer_;
  bool has_data_ = false;
};

}  // namespace cela::client
