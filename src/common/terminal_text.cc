#include "common/terminal_text.h"

#include <cstdio>

#include "common/encoding.h"

namespace cela {
namespace {

void escape_byte(unsigned char b, std::string& out) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", b);
  out += buf;
}

}  // namespace

std::string TerminalEscaper::feed(std::string_view bytes) {
  std::string in;
  if (!pending_.empty()) {
    in = std::move(pending_) + std::string(bytes);
    pending_.clear();
    bytes = in;
  }
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    auto c = static_cast<unsigned char>(bytes[i]);
    if (c < 0x80) {
      if ((c < 0x20 && c != '\n' && c != '\t' && c != '\r') || c == 0x7f) escape_byte(c, out);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    int len = utf8_sequence_at(bytes, i);
    if (len < 0) {  // cut mid-character: decide when the rest arrives
      pending_.assign(bytes.substr(i));
      break;
    }
    if (len == 0) {
      escape_byte(c, out);
      ++i;
      continue;
    }
    auto second = static_cast<unsigned char>(bytes[i + 1]);
    if (c == 0xC2 && second <= 0x9F) {  // U+0080..U+009F: the C1 controls
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", second);
      out += buf;
    } else {
      out.append(bytes.substr(i, static_cast<size_t>(len)));
    }
    i += static_cast<size_t>(len);
  }
  return out;
}

std::string TerminalEscaper::finish() {
  std::string out;
  for (unsigned char b : pending_) escape_byte(b, out);
  pending_.clear();
  return out;
}

}  // namespace cela
