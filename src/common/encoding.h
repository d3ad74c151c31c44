// Byte encodings used across cela: base64 (RFC 4648, with padding), lowercase hex, and
// a structural UTF-8 check (is this text, or must it travel as base64?).
#pragma once

#include <cstddef>
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
// The sequence starting at s[i] (i < s.size()): its length (1-4) when well-formed, 0
// when s[i] starts no well-formed sequence, -1 when s ends inside one that is
// well-formed so far (a stream cut mid-character).
int utf8_sequence_at(std::string_view s, size_t i);
// `s` with every byte that starts no well-formed sequence replaced by U+FFFD: text
// for display, never for naming a file (the exact bytes travel as base64).
std::string utf8_lossy(std::string_view s);

}  // namespace cela
