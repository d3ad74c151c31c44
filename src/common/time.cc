#include "common/time.h"

#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace cela {
namespace {

// Reads exactly `width` decimal digits at `pos`.
bool read_digits(std::string_view text, size_t pos, size_t width, int& out) {
  if (pos + width > text.size()) return false;
  for (size_t i = pos; i < pos + width; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
  }
  std::from_chars(text.data() + pos, text.data() + pos + width, out);
  return true;
}

}  // namespace

int64_t now_ms() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

std::string format_rfc3339(int64_t epoch_ms) {
  // Floor division, so times before 1970 still get a 0..999 millisecond part.
  int64_t seconds = epoch_ms / 1000;
  int64_t millis = epoch_ms % 1000;
  if (millis < 0) {
    millis += 1000;
    seconds -= 1;
  }
  const time_t t = static_cast<time_t>(seconds);
  struct tm tm {};
  gmtime_r(&t, &tm);
  char buf[96];  // room for any int year, which -Wformat-truncation cannot rule out
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return buf;
}

std::string now_rfc3339() {
  return format_rfc3339(now_ms());
}

Result<int64_t> parse_rfc3339(std::string_view text) {
  auto bad = [&] {
    return fail(ErrorCode::invalid_argument, "not an RFC 3339 time: '" + std::string(text) + "'");
  };
  // 0123456789012345678
  // YYYY-MM-DDTHH:MM:SS
  int year, month, day, hour, minute, second;
  if (!read_digits(text, 0, 4, year) || text.size() < 19 || text[4] != '-' ||
      !read_digits(text, 5, 2, month) || text[7] != '-' || !read_digits(text, 8, 2, day) ||
      (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || !read_digits(text, 11, 2, hour) ||
      text[13] != ':' || !read_digits(text, 14, 2, minute) || text[16] != ':' ||
      !read_digits(text, 17, 2, second)) {
    return bad();
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return bad();
  }
  size_t pos = 19;
  int millis = 0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    const size_t start = pos;
    while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
      if (pos - start < 3) millis = millis * 10 + (text[pos] - '0');
      ++pos;
    }
    if (pos == start) return bad();
    for (size_t digits = pos - start; digits < 3; ++digits) millis *= 10;
  }
  int offset_minutes = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-')) {
    int oh, om;
    if (!read_digits(text, pos + 1, 2, oh) || pos + 3 >= text.size() || text[pos + 3] != ':' ||
        !read_digits(text, pos + 4, 2, om) || oh > 23 || om > 59) {
      return bad();
    }
    offset_minutes = (oh * 60 + om) * (text[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != text.size()) return bad();

  struct tm tm {};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second == 60 ? 59 : second;  // a leap second counts as :59 plus one
  const int64_t seconds =
      static_cast<int64_t>(timegm(&tm)) + (second == 60 ? 1 : 0) - offset_minutes * 60;
  if (tm.tm_mday != day) return bad();  // timegm normalised an impossible date (Feb 30)
  return seconds * 1000 + millis;
}

}  // namespace cela
