// Byte encodings used across cela: base64 (RFC 4648, with padding), lowercase hex, and
// a structural UTF-8 check (is this text, or must it travel as base64?).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cela {

std::string base64_encode(std::string_view bytes);
// nullopt when `text` is not canonical padded base64.
std::optional<std::string> base64_decode(std::string_view text);
std::string hex_encode(std::string_view bytes);
// nullopt unless `text` is an even number of hex digits.
std::optional<std::string> hex_decode(std::string_view text);
// Well-formed UTF-8 (RFC 3629: no overlongs, no surrogates, at most U+10FFFF).
bool valid_utf8(std::string_view s);

}  // namespace cela
