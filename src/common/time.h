// Wall-clock time as cela records and shows it: epoch milliseconds and RFC 3339 UTC
// text ("2026-11-29T10:05:00.123Z"), used by the state store, the API and the
// template manifests alike.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.h"

namespace cela {

int64_t now_ms();  // wall clock, milliseconds since the Unix epoch
// "2026-11-29T10:05:00.123Z"
std::string format_rfc3339(int64_t epoch_ms);
std::string now_rfc3339();
// Accepts RFC 3339 date-times with any offset ("Z", "+02:00") and an optional
// fraction (digits past milliseconds are dropped). Returns epoch milliseconds.
Result<int64_t> parse_rfc3339(std::string_view text);

}  // namespace cela
