#include "common/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

namespace cela {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Reads a non-negative decimal ("12", "1.5") from the front of `s`; advances `s`.
bool take_number(std::string_view& s, double& value, bool& fractional) {
  size_t i = 0;
  bool digits = false;
  fractional = false;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, digits = true;
  if (i < s.size() && s[i] == '.') {
    fractional = true;
    ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i, digits = true;
  }
  if (!digits) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + i, value);
  if (ec != std::errc() || ptr != s.data() + i) return false;
  s.remove_prefix(i);
  return true;
}

}  // namespace

Result<uint64_t> parse_size(std::string_view text) {
  std::string s = lower(text);
  std::string_view rest = s;
  double value = 0;
  bool fractional = false;
  if (!take_number(rest, value, fractional))
    return fail(ErrorCode::invalid_argument, "bad size '" + std::string(text) + "' (want e.g. 512m, 2g)");
  double unit = 1;
  if (rest.empty() || rest == "b") {
    unit = 1;
  } else if (rest == "k" || rest == "kb" || rest == "kib") {
    unit = 1024.0;
  } else if (rest == "m" || rest == "mb" || rest == "mib") {
    unit = 1024.0 * 1024;
  } else if (rest == "g" || rest == "gb" || rest == "gib") {
    unit = 1024.0 * 1024 * 1024;
  } else if (rest == "t" || rest == "tb" || rest == "tib") {
    unit = 1024.0 * 1024 * 1024 * 1024;
  } else {
    return fail(ErrorCode::invalid_argument,
                "bad size '" + std::string(text) + "': unknown unit '" + std::string(rest) + "'");
  }
  if (fractional && unit == 1)
    return fail(ErrorCode::invalid_argument, "bad size '" + std::string(text) + "': fractional bytes");
  double bytes = std::floor(value * unit);
  if (bytes < 1) return fail(ErrorCode::invalid_argument, "bad size '" + std::string(text) + "': must be > 0");
  if (bytes >= 18446744073709551615.0)
    return fail(ErrorCode::invalid_argument, "bad size '" + std::string(text) + "': too large");
  return static_cast<uint64_t>(bytes);
}

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::string s = lower(text);
  std::string_view rest = s;
  auto bad = [&](std::string why) {
    return fail(ErrorCode::invalid_argument,
                "bad duration '" + std::string(text) + "': " + why + " (want e.g. 30s, 1m30s, 250ms)");
  };
  if (rest.empty()) return bad("empty");
  double total_ms = 0;
  bool first = true;
  while (!rest.empty()) {
    double value = 0;
    bool fractional = false;
    if (!take_number(rest, value, fractional)) return bad("expected a number");
    double unit_ms;
    if (rest.empty() && first) {
      unit_ms = 1000;  // bare number: seconds
    } else if (rest.starts_with("ms")) {
      unit_ms = 1, rest.remove_prefix(2);
    } else if (rest.starts_with("s")) {
      unit_ms = 1000, rest.remove_prefix(1);
    } else if (rest.starts_with("m")) {
      unit_ms = 60'000, rest.remove_prefix(1);
    } else if (rest.starts_with("h")) {
      unit_ms = 3'600'000, rest.remove_prefix(1);
    } else {
      return bad("unknown unit");
    }
    total_ms += value * unit_ms;
    first = false;
  }
  if (total_ms < 1) return bad("must be at least 1ms");
  if (total_ms > 1e15) return bad("too large");
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(total_ms)));
}

std::string format_size(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  if (u == 0 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, units[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

std::string format_duration(uint64_t ms) {
  char buf[32];
  if (ms < 1000) {
    std::snprintf(buf, sizeof buf, "%llu ms", static_cast<unsigned long long>(ms));
  } else if (ms < 120'000) {
    double s = ms / 1000.0;
    std::snprintf(buf, sizeof buf, s == std::floor(s) ? "%.0f s" : "%.1f s", s);
  } else {
    double m = ms / 60'000.0;
    std::snprintf(buf, sizeof buf, m == std::floor(m) ? "%.0f min" : "%.1f min", m);
  }
  return buf;
}

}  // namespace cela
