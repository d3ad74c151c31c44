#include "common/json_text.h"

#include <boost/json/serialize.hpp>
#include <charconv>
#include <cmath>

#include "common/encoding.h"

namespace cela {
namespace json = boost::json;

namespace {

void write(const json::value& v, std::string& out);

// Boost.JSON writes a string's bytes as they are; a file name or a message quoting one
// may not be UTF-8, and the answer must be (the exact bytes go in a `_b64` sibling).
void write_string(json::string_view s, std::string& out) {
  if (valid_utf8(s)) {
    out += json::serialize(s);
  } else {
    out += json::serialize(json::string_view(utf8_lossy(s)));
  }
}

void write_double(double d, std::string& out) {
  if (!std::isfinite(d)) {
    out += "null";  // JSON has no NaN or infinity
    return;
  }
  if (d == std::trunc(d) && std::fabs(d) < 9.007199254740992e15) {
    out += std::to_string(static_cast<int64_t>(d));
    return;
  }
  // Shortest text that reads back as the same double, without an exponent.
  char buf[400];
  auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::fixed);
  out.append(buf, r.ptr);
}

void write(const json::value& v, std::string& out) {
  switch (v.kind()) {
    case json::kind::double_: write_double(v.get_double(), out); return;
    case json::kind::object: {
      out += '{';
      bool first = true;
      for (const auto& kv : v.get_object()) {
        if (!first) out += ',';
        first = false;
        write_string(kv.key(), out);
        out += ':';
        write(kv.value(), out);
      }
      out += '}';
      return;
    }
    case json::kind::array: {
      out += '[';
      bool first = true;
      for (const auto& item : v.get_array()) {
        if (!first) out += ',';
        first = false;
        write(item, out);
      }
      out += ']';
      return;
    }
    case json::kind::string: write_string(v.get_string(), out); return;
    default: out += json::serialize(v); return;
  }
}

}  // namespace

std::string json_text(const json::value& value) {
  std::string out;
  write(value, out);
  return out;
}

}  // namespace cela
