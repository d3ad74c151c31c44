// Request: what a handler knows about one HTTP request, already decoded. Built by the
// connection (api/connection.cc) after the header is read and the route is matched;
// owned by the request's Responder, so it stays valid as long as the handler keeps the
// Responder (see api/responder.h).
#pragma once

#include <sys/types.h>

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_error.h"

namespace cela::api {

namespace http = boost::beast::http;

enum class Transport { unix_socket, tcp };

// The peer of a unix-socket connection, from SO_PEERCRED at accept time.
struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// Who is calling, as decided by the authenticator. Opaque to the HTTP layer.
struct Principal {
  std::string tenant_id;
  bool admin = false;  // manages its own tenant
  std::string key_id;  // empty for local (unix socket) callers
  bool host_admin = false;  // acts across tenants (implies admin)
};

// Query parameters, percent-decoded ('+' reads as a space, as in form encoding; a
// literal plus arrives as %2B). A key may repeat; a key without '=' has value "".
using QueryParams = std::multimap<std::string, std::string, std::less<>>;

struct Request {
  http::verb method = http::verb::unknown;
  std::string method_name;            // as sent, e.g. "GET"
  std::string target;                 // raw request-target, e.g. "/v1/x?y=1"
  std::string path;                   // raw (still encoded) path part of target
  std::vector<std::string> segments;  // decoded path segments ("/a%2Fb/c" -> "a/b","c")
  std::map<std::string, std::string, std::less<>> params;  // route captures {name}
  QueryParams query;
  http::fields headers;    // case-insensitive lookup
  std::string body;        // empty until the body is read (and for auth)
  std::string request_id;  // "r-" + 16 hex digits; in every answer
  Transport transport = Transport::tcp;
  std::optional<PeerCred> peer;        // unix socket only
  std::string remote_address;          // "ip:port" for tcp, the socket path for unix
  std::optional<Principal> principal;  // set by the authenticator; empty on public routes
  ErrorStyle error_style = ErrorStyle::cela;  // the matched route's (RouteOptions)

  // A route capture; "" when the route has no such capture.
  std::string_view param(std::string_view name) const;
  // The first value of a query parameter.
  std::optional<std::string_view> query_value(std::string_view name) const;
  // Every value of a repeated query parameter, in order.
  std::vector<std::string_view> query_values(std::string_view name) const;
  std::optional<std::string_view> header(std::string_view name) const;
  // A boolean query flag: absent -> false; "", "1", "true", "yes" -> true;
  // "0", "false", "no" -> false; anything else -> invalid_request.
  ApiResult<bool> query_flag(std::string_view name) const;
};

// The key of "Authorization: Bearer <key>" (scheme case-insensitive), if present.
std::optional<std::string_view> bearer_token(const Request& request);

// The key of "X-API-KEY: <key>" (E2B's SDKs), trimmed, if present and not empty.
std::optional<std::string_view> api_key_header(const Request& request);

// The Last-Event-ID header of an SSE reconnect, if present.
std::optional<std::string_view> last_event_id(const Request& request);
// The same, for streams whose ids are byte offsets: absent -> nullopt,
// not a decimal uint64 -> invalid_request.
ApiResult<std::optional<std::uint64_t>> last_event_offset(const Request& request);

// The decoded form of a request-target ("origin-form": path and optional query).
struct ParsedTarget {
  std::string path;
  std::vector<std::string> segments;
  QueryParams query;
};
// invalid_request on a target that is not origin-form or has bad percent-encoding.
// "/" has no segments; a trailing slash is ignored ("/v1/sessions/" == "/v1/sessions").
ApiResult<ParsedTarget> parse_target(std::string_view target);

// Request framing (RFC 9112 section 6): a body is delimited by one Content-Length
// holding one decimal number, or, on HTTP/1.1, by a Transfer-Encoding that is exactly
// the sole coding `chunked`. Anything else is invalid_request: another coding
// (identity, gzip), a list (`gzip, chunked`, `chunked, identity`), a repeated header,
// both headers, a list or repeat of Content-Length, Transfer-Encoding on HTTP/1.0.
// Beast would read some of these as "no body" and others as chunked; a proxy in front
// of the daemon may frame the same bytes the other way, and the rest of the byte stream
// would then be read as a second, smuggled request. The connection closes after the 400.
ApiResult<void> check_framing(const http::fields& headers, unsigned version);

// "r-" followed by 16 random hex digits.
std::string new_request_id();

}  // namespace cela::api
