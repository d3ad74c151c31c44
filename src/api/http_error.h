// ApiError: the one shape of every non-2xx answer (API.md "Errors"), and the one place
// where internal failures (cela::Error) become wire errors.
//
// A code maps to exactly one HTTP status; the factories below are the only way the
// code/status/category triple is chosen, so the table in API.md stays true:
//
//   code                    status  category  retryable
//   invalid_request          400    user      no
//   unauthorized             401    user      no    (+ WWW-Authenticate: Bearer)
//   forbidden                403    user      no    (valid key, not allowed: e.g. not admin)
//   policy_denied            403    policy    no
//   not_found                404    user      no
//   method_not_allowed       405    user      no    (+ Allow, set by the router)
//   request_timeout          408    user      yes   (request body too slow)
//   conflict                 409    user      no    (wrong state)
//   gone                     410    user      no    (session ended; reason in message)
//   payload_too_large        413    user      no
//   unsupported_media_type   415    user      no
//   quota_exceeded           429    quota     no
//   rate_limited             429    quota     yes   (+ Retry-After)
//   internal                 500    platform  no
//   bad_gateway              502    user      yes   (port proxy: the session's server
//                                                    refused, failed or did not answer)
//   capacity_exceeded        503    platform  yes   (+ Retry-After)
//
// The three codes not in API.md's table (405, 408, 415) are HTTP-level answers of the
// server itself; their category is `user` because the request was at fault.
#pragma once

#include <boost/json/object.hpp>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace cela::api {

// Extra response headers, in order.
using Headers = std::vector<std::pair<std::string, std::string>>;

struct ApiError {
  std::string code;      // stable machine code, e.g. "capacity_exceeded"
  // A facade's own code for the same error, when its protocol distinguishes more than
  // cela does (Connect's "already_exists" for a conflict): used by ErrorStyle::connect
  // instead of the mapping from `code`. Empty: mapped.
  std::string wire_code;
  int status = 500;      // HTTP status, fixed by the code
  std::string category;  // "user" | "policy" | "quota" | "platform"
  std::string message;   // one human line; never host paths or internal detail
  std::optional<std::string> session_id;
  std::optional<std::string> exec_id;
  bool retryable = false;
  std::optional<int> retry_after_s;  // also sent as the Retry-After header
  // Written to the daemon log with the request id, never sent to the client
  // (e.g. the errno and path behind an `internal`).
  std::string log_detail;

  // Copies carrying the ids of the session/exec the error is about.
  ApiError with_session(std::string id) const;
  ApiError with_exec(std::string id) const;

  static ApiError invalid_request(std::string message);
  static ApiError unauthorized(std::string message = "missing or invalid API key");
  static ApiError forbidden(std::string message);
  static ApiError policy_denied(std::string message);
  static ApiError not_found(std::string message);
  static ApiError method_not_allowed(std::string message);
  static ApiError request_timeout(std::string message);
  static ApiError conflict(std::string message);
  static ApiError gone(std::string message);
  static ApiError payload_too_large(std::string message);
  static ApiError unsupported_media_type(std::string message);
  static ApiError quota_exceeded(std::string message);
  static ApiError rate_limited(std::string message, int retry_after_s);
  static ApiError capacity_exceeded(std::string message, int retry_after_s = 1);
  static ApiError bad_gateway(std::string message);
  // The client sees only `message`; `log_detail` goes to the daemon log.
  static ApiError internal(std::string log_detail = {}, std::string message = "internal error");
};

template <class T>
using ApiResult = std::expected<T, ApiError>;

// For `return api_fail(ApiError::not_found(...))` in functions returning ApiResult<T>.
inline std::unexpected<ApiError> api_fail(ApiError e) {
  return std::unexpected(std::move(e));
}

// The JSON body of an error answer, exactly as API.md shows it:
// {"error": {"code", "category", "message", "session_id", "exec_id", "request_id",
//            "retryable", "retry_after_s"}} with null for absent values.
boost::json::object error_body(const ApiError& e, std::string_view request_id);

// The shape an error takes on the wire, chosen per route (RouteOptions::error_style):
//   cela     API.md's {"error": {code, category, message, ...}} (error_body above)
//   e2b      E2B's REST shape {"code": <HTTP status>, "message"} (the E2B SDK reads it)
//   connect  the Connect protocol's {"code": "<connect code>", "message"}, with the
//            HTTP status Connect assigns to that code
enum class ErrorStyle { cela, e2b, connect };

struct RenderedError {
  int status = 500;
  std::string body;  // JSON text
};
RenderedError render_error(ErrorStyle style, const ApiError& e, std::string_view request_id);
// Connect's name for `e` (wire_code, else mapped from code) and that code's HTTP status.
std::string connect_code(const ApiError& e);
int connect_status(std::string_view connect_code);

// The headers an error answer carries besides Content-Type: Retry-After when
// retry_after_s is set, WWW-Authenticate: Bearer on 401.
Headers error_headers(const ApiError& e);

// The mapping of internal failures to wire errors, in one place: each ErrorCode of the
// same name maps to its ApiError (conflict, gone, quota_exceeded, capacity_exceeded with
// Retry-After 1, policy_denied); invalid_argument -> invalid_request, not_found ->
// not_found, permission_denied -> forbidden, limit -> payload_too_large; system with
// EMFILE or ENFILE (out of descriptors) -> capacity_exceeded, the errno text in
// log_detail; other system and internal -> internal, whose Error text goes to
// log_detail only (it names host paths and errnos). The message is Error::message().
ApiError from_error(const Error& error);

}  // namespace cela::api
