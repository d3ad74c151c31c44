#include "api/request.h"

#include <strings.h>

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/url_view.hpp>
#include <charconv>

#include "common/random.h"

namespace cela::api {

std::string_view Request::param(std::string_view name) const {
  auto it = params.find(name);
  if (it == params.end()) return {};
  return it->second;
}

std::optional<std::string_view> Request::query_value(std::string_view name) const {
  auto it = query.find(name);
  if (it == query.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string_view> Request::query_values(std::string_view name) const {
  std::vector<std::string_view> values;
  auto [first, last] = query.equal_range(name);
  for (auto it = first; it != last; ++it) values.push_back(it->second);
  return values;
}

std::optional<std::string_view> Request::header(std::string_view name) const {
  auto it = headers.find(name);
  if (it == headers.end()) return std::nullopt;
  return std::string_view(it->value().data(), it->value().size());
}

ApiResult<bool> Request::query_flag(std::string_view name) const {
  auto value = query_value(name);
  if (!value) return false;
  if (value->empty() || *value == "1" || *value == "true" || *value == "yes") return true;
  if (*value == "0" || *value == "false" || *value == "no") return false;
  return api_fail(ApiError::invalid_request("query parameter `" + std::string(name) +
                                            "` must be 1/0 or true/false"));
}

std::optional<std::string_view> bearer_token(const Request& request) {
  auto value = request.header("Authorization");
  constexpr std::string_view kScheme = "bearer ";
  if (!value || value->size() <= kScheme.size()) return std::nullopt;
  if (strncasecmp(value->data(), kScheme.data(), kScheme.size()) != 0) return std::nullopt;
  std::string_view token = value->substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty()) return std::nullopt;
  return token;
}

std::optional<std::string_view> api_key_header(const Request& request) {
  auto value = request.header("X-API-KEY");
  if (!value) return std::nullopt;
  std::string_view token = *value;
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  if (token.empty()) return std::nullopt;
  return token;
}

std::optional<std::string_view> last_event_id(const Request& request) {
  return request.header("Last-Event-ID");
}

ApiResult<std::optional<std::uint64_t>> last_event_offset(const Request& request) {
  auto value = last_event_id(request);
  if (!value) return std::optional<std::uint64_t>{};
  std::uint64_t offset = 0;
  auto [end, ec] = std::from_chars(value->data(), value->data() + value->size(), offset);
  if (ec != std::errc() || end != value->data() + value->size() || value->empty()) {
    return api_fail(ApiError::invalid_request("Last-Event-ID must be a byte offset"));
  }
  return std::optional<std::uint64_t>{offset};
}

ApiResult<ParsedTarget> parse_target(std::string_view target) {
  auto url = boost::urls::parse_origin_form(target);
  if (!url) {
    return api_fail(
        ApiError::invalid_request("malformed request target: " + url.error().message()));
  }
  ParsedTarget parsed;
  parsed.path = std::string(url->encoded_path());
  for (auto segment : url->segments()) parsed.segments.emplace_back(segment);
  if (!parsed.segments.empty() && parsed.segments.back().empty()) parsed.segments.pop_back();

  boost::urls::encoding_opts opts;
  opts.space_as_plus = true;
  for (auto param : url->params(opts)) parsed.query.emplace(param.key, param.value);
  return parsed;
}

ApiResult<void> check_framing(const http::fields& headers, unsigned version) {
  auto bad = [](std::string what) {
    return api_fail(ApiError::invalid_request("request framing refused: " + what));
  };
  auto trimmed = [](std::string_view v) {
    while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
    return v;
  };
  std::size_t codings = headers.count(http::field::transfer_encoding);
  std::size_t lengths = headers.count(http::field::content_length);
  if (codings > 0 && lengths > 0) return bad("both Transfer-Encoding and Content-Length");
  if (lengths > 1) return bad("Content-Length given more than once");
  if (lengths == 1) {
    std::string_view v = trimmed(headers[http::field::content_length]);
    if (v.empty() || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return bad("Content-Length must be one decimal number");
  }
  if (codings == 0) return {};
  if (codings > 1) return bad("Transfer-Encoding given more than once");
  if (version < 11) return bad("Transfer-Encoding on an HTTP/1.0 request");
  if (!boost::beast::iequals(trimmed(headers[http::field::transfer_encoding]), "chunked"))
    return bad("Transfer-Encoding must be exactly `chunked`");
  return {};
}

std::string new_request_id() { return random_id("r"); }

}  // namespace cela::api
