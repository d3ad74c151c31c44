// MultipartReader: a multipart/form-data body (RFC 7578) split into its parts as the
// bytes arrive, so a form upload streams like any other body (api/body_sink.h): the
// reader holds at most one input chunk plus a delimiter's length and one part's
// header block (16 KiB at most).
//
// feed() turns the next bytes into events, in order: a part's start (its form name,
// file name and Content-Type), its data in pieces (owned copies, each at most the size
// of the chunk fed), its end; then `done` after the closing delimiter (the epilogue is
// ignored). finish() at the end of the body says whether it was complete.
//
// File names come from Content-Disposition's `filename` parameter as browsers and
// undici send it: quoted, with '"', CR and LF percent-encoded (%22, %0D, %0A), which
// are decoded; every other byte is kept as sent (a path stays a path).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_error.h"

namespace cela::api {

struct MultipartPart {
  std::string name;                     // the form field's name
  std::optional<std::string> filename;  // absent when the part is no file
  std::string content_type;             // "" when not given
};

struct MultipartEvent {
  enum class Kind { begin, data, end, done };
  Kind kind = Kind::data;
  MultipartPart part;  // begin
  std::string data;    // data
};

class MultipartReader {
 public:
  // The boundary of a `multipart/form-data; boundary=...` Content-Type (quoted or not);
  // invalid_request when it is another type or has no valid boundary (1-70 chars).
  static ApiResult<std::string> boundary_of(std::string_view content_type);

  explicit MultipartReader(std::string boundary);

  // invalid_request on a malformed body (a part header block over 16 KiB, a header
  // without a colon, bytes after a delimiter other than "--" or CRLF).
  ApiResult<void> feed(std::string_view bytes, std::vector<MultipartEvent>& out);
  // invalid_request unless the closing delimiter was seen.
  ApiResult<void> finish() const;

 private:
  enum class State { preamble, after_delimiter, headers, body, done };
  ApiResult<MultipartPart> parse_headers(std::string_view block) const;

  std::string delimiter_;  // "\r\n--" + boundary
  std::string buffer_;
  State state_ = State::preamble;
};

}  // namespace cela::api
