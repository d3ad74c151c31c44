#include "api/http_error.h"

#include <cerrno>
#include <map>

#include <boost/json/value.hpp>

#include "common/json_text.h"

namespace cela::api {
namespace {

ApiError make(std::string code, int status, std::string category, std::string message,
              bool retryable = false) {
  ApiError e;
  e.code = std::move(code);
  e.status = status;
  e.category = std::move(category);
  e.message = std::move(message);
  e.retryable = retryable;
  return e;
}

boost::json::value string_or_null(const std::optional<std::string>& s) {
  if (!s) return nullptr;
  return boost::json::value(*s);
}

}  // namespace

ApiError ApiError::with_session(std::string id) const {
  ApiError copy = *this;
  copy.session_id = std::move(id);
  return copy;
}

ApiError ApiError::with_exec(std::string id) const {
  ApiError copy = *this;
  copy.exec_id = std::move(id);
  return copy;
}

ApiError ApiError::invalid_request(std::string message) {
  return make("invalid_request", 400, "user", std::move(message));
}
ApiError ApiError::unauthorized(std::string message) {
  return make("unauthorized", 401, "user", std::move(message));
}
ApiError ApiError::forbidden(std::string message) {
  return make("forbidden", 403, "user", std::move(message));
}
ApiError ApiError::policy_denied(std::string message) {
  return make("policy_denied", 403, "policy", std::move(message));
}
ApiError ApiError::not_found(std::string message) {
  return make("not_found", 404, "user", std::move(message));
}
ApiError ApiError::method_not_allowed(std::string message) {
  return make("method_not_allowed", 405, "user", std::move(message));
}
ApiError ApiError::request_timeout(std::string message) {
  return make("request_timeout", 408, "user", std::move(message), true);
}
ApiError ApiError::conflict(std::string message) {
  return make("conflict", 409, "user", std::move(message));
}
ApiError ApiError::gone(std::string message) {
  return make("gone", 410, "user", std::move(message));
}
ApiError ApiError::payload_too_large(std::string message) {
  return make("payload_too_large", 413, "user", std::move(message));
}
ApiError ApiError::unsupported_media_type(std::string message) {
  return make("unsupported_media_type", 415, "user", std::move(message));
}
ApiError ApiError::quota_exceeded(std::string message) {
  return make("quota_exceeded", 429, "quota", std::move(message));
}
ApiError ApiError::rate_limited(std::string message, int retry_after_s) {
  ApiError e = make("rate_limited", 429, "quota", std::move(message), true);
  e.retry_after_s = retry_after_s;
  return e;
}
ApiError ApiError::capacity_exceeded(std::string message, int retry_after_s) {
  ApiError e = make("capacity_exceeded", 503, "platform", std::move(message), true);
  e.retry_after_s = retry_after_s;
  return e;
}
ApiError ApiError::bad_gateway(std::string message) {
  return make("bad_gateway", 502, "user", std::move(message), true);
}
ApiError ApiError::internal(std::string log_detail, std::string message) {
  ApiError e = make("internal", 500, "platform", std::move(message));
  e.log_detail = std::move(log_detail);
  return e;
}

boost::json::object error_body(const ApiError& e, std::string_view request_id) {
  boost::json::object inner;
  inner["code"] = e.code;
  inner["category"] = e.category;
  inner["message"] = e.message;
  inner["session_id"] = string_or_null(e.session_id);
  inner["exec_id"] = string_or_null(e.exec_id);
  inner["request_id"] = request_id;
  inner["retryable"] = e.retryable;
  if (e.retry_after_s) {
    inner["retry_after_s"] = *e.retry_after_s;
  } else {
    inner["retry_after_s"] = nullptr;
  }
  boost::json::object body;
  body["error"] = std::move(inner);
  return body;
}

std::string connect_code(const ApiError& e) {
  if (!e.wire_code.empty()) return e.wire_code;
  static const std::map<std::string, std::string, std::less<>> kCodes = {
      {"invalid_request", "invalid_argument"},
      {"unauthorized", "unauthenticated"},
      {"forbidden", "permission_denied"},
      {"policy_denied", "permission_denied"},
      {"not_found", "not_found"},
      {"method_not_allowed", "unimplemented"},
      {"request_timeout", "deadline_exceeded"},
      {"conflict", "failed_precondition"},
      {"gone", "not_found"},
      {"payload_too_large", "resource_exhausted"},
      {"unsupported_media_type", "invalid_argument"},
      {"quota_exceeded", "resource_exhausted"},
      {"rate_limited", "resource_exhausted"},
      {"bad_gateway", "unavailable"},
      {"capacity_exceeded", "unavailable"},
  };
  auto it = kCodes.find(e.code);
  return it == kCodes.end() ? "internal" : it->second;
}

int connect_status(std::string_view code) {
  static const std::map<std::string, int, std::less<>> kStatus = {
      {"canceled", 499},          {"unknown", 500},           {"invalid_argument", 400},
      {"deadline_exceeded", 504}, {"not_found", 404},         {"already_exists", 409},
      {"permission_denied", 403}, {"resource_exhausted", 429}, {"failed_precondition", 400},
      {"aborted", 409},           {"out_of_range", 400},      {"unimplemented", 501},
      {"internal", 500},          {"unavailable", 503},       {"data_loss", 500},
      {"unauthenticated", 401},
  };
  auto it = kStatus.find(code);
  return it == kStatus.end() ? 500 : it->second;
}

RenderedError render_error(ErrorStyle style, const ApiError& e, std::string_view request_id) {
  switch (style) {
    case ErrorStyle::e2b: {
      boost::json::object o{{"code", e.status}, {"message", e.message}};
      // E2B's data plane names the sandbox in its 502s (unknown sandbox, closed port).
      if (e.status == 502 && e.session_id) o["sandboxId"] = *e.session_id;
      return {e.status, cela::json_text(o)};
    }
    case ErrorStyle::connect: {
      std::string code = connect_code(e);
      int status = connect_status(code);
      return {status,
              cela::json_text(boost::json::object{{"code", code}, {"message", e.message}})};
    }
    case ErrorStyle::cela:
      break;
  }
  return {e.status, cela::json_text(error_body(e, request_id))};
}

Headers error_headers(const ApiError& e) {
  Headers headers;
  if (e.retry_after_s) headers.emplace_back("Retry-After", std::to_string(*e.retry_after_s));
  if (e.status == 401) headers.emplace_back("WWW-Authenticate", "Bearer");
  return headers;
}

ApiError from_error(const Error& error) {
  switch (error.code) {
    case ErrorCode::invalid_argument:
      return ApiError::invalid_request(error.message());
    case ErrorCode::not_found:
      return ApiError::not_found(error.message());
    case ErrorCode::permission_denied:
      return ApiError::forbidden(error.message());
    case ErrorCode::limit:
      return ApiError::payload_too_large(error.message());
    case ErrorCode::conflict:
      return ApiError::conflict(error.message());
    case ErrorCode::gone:
      return ApiError::gone(error.message());
    case ErrorCode::quota_exceeded:
      return ApiError::quota_exceeded(error.message());
    case ErrorCode::capacity_exceeded:
      return ApiError::capacity_exceeded(error.message());
    case ErrorCode::policy_denied:
      return ApiError::policy_denied(error.message());
    case ErrorCode::system:
      // Out of descriptors is the host at capacity, not a bug: retry once some free up.
      if (error.err == EMFILE || error.err == ENFILE) {
        ApiError e = ApiError::capacity_exceeded("server is out of file descriptors");
        e.log_detail = error.message();
        return e;
      }
      break;
    case ErrorCode::internal:
      break;
  }
  return ApiError::internal(error.message());
}

}  // namespace cela::api
