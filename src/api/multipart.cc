#include "api/multipart.h"

#include <algorithm>
#include <cctype>

namespace cela::api {

namespace {

constexpr size_t kMaxHeaderBlock = 16 * 1024;

std::string lower(std::string_view s) {
  std::string out(s);
  std::ranges::transform(out, out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// `type; k=v; k2="v 2"` -> the type and the parameters (names lower-cased, quoted values
// unquoted, backslash escapes honoured).
struct HeaderValue {
  std::string type;
  std::vector<std::pair<std::string, std::string>> params;
  const std::string* param(std::string_view name) const {
    for (const auto& [k, v] : params)
      if (k == name) return &v;
    return nullptr;
  }
};

HeaderValue parse_value(std::string_view v) {
  HeaderValue out;
  size_t i = 0;
  size_t semi = v.find(';');
  out.type = lower(trim(v.substr(0, semi)));
  i = semi == std::string_view::npos ? v.size() : semi + 1;
  while (i < v.size()) {
    while (i < v.size() && (v[i] == ' ' || v[i] == '\t' || v[i] == ';')) ++i;
    size_t eq = v.find('=', i);
    if (eq == std::string_view::npos) break;
    std::string key = lower(trim(v.substr(i, eq - i)));
    i = eq + 1;
    std::string value;
    if (i < v.size() && v[i] == '"') {
      for (++i; i < v.size() && v[i] != '"'; ++i) {
        if (v[i] == '\\' && i + 1 < v.size()) ++i;
        value.push_back(v[i]);
      }
      if (i < v.size()) ++i;  // the closing quote
      while (i < v.size() && v[i] != ';') ++i;
    } else {
      size_t end = v.find(';', i);
      if (end == std::string_view::npos) end = v.size();
      value = std::string(trim(v.substr(i, end - i)));
      i = end;
    }
    out.params.emplace_back(std::move(key), std::move(value));
  }
  return out;
}

// undici and browsers percent-encode '"', CR and LF in a form's file name.
std::string decode_filename(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      std::string code = lower(s.substr(i + 1, 2));
      char c = code == "22" ? '"' : code == "0d" ? '\r' : code == "0a" ? '\n' : '\0';
      if (c) {
        out.push_back(c);
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

}  // namespace

ApiResult<std::string> MultipartReader::boundary_of(std::string_view content_type) {
  HeaderValue v = parse_value(content_type);
  if (v.type != "multipart/form-data")
    return api_fail(ApiError::invalid_request("expected a multipart/form-data body"));
  const std::string* b = v.param("boundary");
  if (!b || b->empty() || b->size() > 70 || b->back() == ' ')
    return api_fail(ApiError::invalid_request("multipart/form-data without a valid boundary"));
  for (unsigned char c : *b)
    if (c < 0x20 || c > 0x7e) return api_fail(ApiError::invalid_request("multipart boundary with a control byte"));
  return *b;
}

MultipartReader::MultipartReader(std::string boundary) : delimiter_("\r\n--" + boundary), buffer_("\r\n") {}

ApiResult<MultipartPart> MultipartReader::parse_headers(std::string_view block) const {
  MultipartPart part;
  bool disposition = false;
  size_t pos = 0;
  while (pos < block.size()) {
    size_t end = block.find("\r\n", pos);
    if (end == std::string_view::npos) end = block.size();
    std::string_view line = block.substr(pos, end - pos);
    pos = end + 2;
    if (line.empty()) continue;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return api_fail(ApiError::invalid_request("malformed header in a multipart part"));
    std::string name = lower(trim(line.substr(0, colon)));
    std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-disposition") {
      HeaderValue v = parse_value(value);
      if (v.type != "form-data") return api_fail(ApiError::invalid_request("a multipart part that is not form-data"));
      if (const auto* n = v.param("name")) part.name = *n;
      if (const auto* f = v.param("filename")) part.filename = decode_filename(*f);
      disposition = true;
    } else if (name == "content-type") {
      part.content_type = std::string(value);
    }
  }
  if (!disposition) return api_fail(ApiError::invalid_request("a multipart part without Content-Disposition"));
  return part;
}

ApiResult<void> MultipartReader::feed(std::string_view bytes, std::vector<MultipartEvent>& out) {
  buffer_.append(bytes);
  for (;;) {
    switch (state_) {
      case State::done:
        buffer_.clear();  // the epilogue
        return {};
      case State::preamble: {
        size_t at = buffer_.find(delimiter_);
        if (at == std::string::npos) {
          // Keep what could be the start of a delimiter.
          if (buffer_.size() > delimiter_.size()) buffer_.erase(0, buffer_.size() - delimiter_.size());
          return {};
        }
        buffer_.erase(0, at + delimiter_.size());
        state_ = State::after_delimiter;
        break;
      }
      case State::after_delimiter: {
        if (buffer_.size() < 2) return {};
        if (buffer_.starts_with("--")) {
          state_ = State::done;
          out.push_back({.kind = MultipartEvent::Kind::done, .part = {}, .data = {}});
          break;
        }
        size_t i = 0;
        while (i < buffer_.size() && (buffer_[i] == ' ' || buffer_[i] == '\t')) ++i;  // transport padding
        if (i + 2 > buffer_.size()) {
          if (i > 256) return api_fail(ApiError::invalid_request("malformed multipart delimiter"));
          return {};
        }
        if (buffer_.compare(i, 2, "\r\n") != 0) return api_fail(ApiError::invalid_request("malformed multipart delimiter"));
        buffer_.erase(0, i + 2);
        state_ = State::headers;
        break;
      }
      case State::headers: {
        size_t end = buffer_.starts_with("\r\n") ? 0 : buffer_.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (buffer_.size() > kMaxHeaderBlock)
            return api_fail(ApiError::invalid_request("a multipart part's headers are over 16 KiB"));
          return {};
        }
        if (end > kMaxHeaderBlock) return api_fail(ApiError::invalid_request("a multipart part's headers are over 16 KiB"));
        auto part = parse_headers(std::string_view(buffer_).substr(0, end));
        if (!part) return api_fail(part.error());
        buffer_.erase(0, end == 0 ? 2 : end + 4);
        out.push_back({.kind = MultipartEvent::Kind::begin, .part = std::move(*part), .data = {}});
        state_ = State::body;
        break;
      }
      case State::body: {
        size_t at = buffer_.find(delimiter_);
        if (at == std::string::npos) {
          // Everything but a possible delimiter start is data.
          if (buffer_.size() > delimiter_.size()) {
            size_t n = buffer_.size() - delimiter_.size();
            out.push_back({.kind = MultipartEvent::Kind::data, .part = {}, .data = buffer_.substr(0, n)});
            buffer_.erase(0, n);
          }
          return {};
        }
        if (at > 0) out.push_back({.kind = MultipartEvent::Kind::data, .part = {}, .data = buffer_.substr(0, at)});
        out.push_back({.kind = MultipartEvent::Kind::end, .part = {}, .data = {}});
        buffer_.erase(0, at + delimiter_.size());
        state_ = State::after_delimiter;
        break;
      }
    }
  }
}

ApiResult<void> MultipartReader::finish() const {
  if (state_ != State::done) return api_fail(ApiError::invalid_request("the multipart body ended early"));
  return {};
}

}  // namespace cela::api
