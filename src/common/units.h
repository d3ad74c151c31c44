// Parsing of human sizes ("512m", "1GiB") and durations ("30s", "1m30s", "250ms").
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace cela {

// Sizes: a decimal number with an optional binary suffix: b, k/kb/kib, m/mb/mib,
// g/gb/gib, t/tb/tib (case-insensitive; all powers of 1024). A bare number is bytes.
// Fractions are allowed with a suffix ("1.5g"). Zero and overflow are rejected.
Result<uint64_t> parse_size(std::string_view text);

// Durations: one or more <number><unit> groups, unit in ms, s, m, h (e.g. "1m30s");
// a bare number means seconds. Fractions allowed ("0.5s"). Zero is rejected.
Result<std::chrono::milliseconds> parse_duration(std::string_view text);

// "512 MiB", "1.5 GiB", "300 B": for human messages.
std::string format_size(uint64_t bytes);

// "250 ms", "30 s", "1.5 s", "2 min": for human messages.
std::string format_duration(uint64_t ms);

}  // namespace cela
