#include "store/records.h"

#include <openssl/rand.h>

#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace cela::store {

namespace json = boost::json;

namespace {

json::value text_or_null(const std::string& text) {
  if (text.empty()) return nullptr;
  return json::value(text);
}

json::value int_or_null(const std::optional<int64_t>& value) {
  if (!value) return nullptr;
  return json::value(*value);
}

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

bool is_session_state(std::string_view state) {
  return is_live_session_state(state) || state == session_state::terminated ||
         state == session_state::failed;
}

bool is_live_session_state(std::string_view state) {
  return state == session_state::starting || state == session_state::ready ||
         state == session_state::running || state == session_state::paused;
}

bool is_exec_state(std::string_view state) {
  return state == exec_state::running || state == exec_state::exited ||
         state == exec_state::killed || state == exec_state::timed_out ||
         state == exec_state::oom_killed || state == exec_state::failed;
}

json::object to_json(const SessionRecord& s) {
  json::object metadata;
  for (const auto& [key, value] : s.metadata) metadata[key] = value;
  json::value termination = nullptr;
  if (!s.termination_reason.empty()) {
    json::object t;
    t["reason"] = s.termination_reason;
    t["at"] = text_or_null(s.termination_at);
    if (!s.termination_message.empty()) t["message"] = s.termination_message;
    termination = std::move(t);
  }
  json::object o;
  o["id"] = s.id;
  o["state"] = s.state;
  o["template"] = s.template_ref;
  o["limits"] = s.limits;
  o["network"] = s.network;
  o["created_at"] = s.created_at;
  o["ready_at"] = text_or_null(s.ready_at);
  o["expires_at"] = text_or_null(s.expires_at);
  o["metadata"] = std::move(metadata);
  o["termination"] = std::move(termination);
  o["startup_ms"] = int_or_null(s.startup_ms);
  if (!s.cleanup.is_null()) o["cleanup"] = s.cleanup;
  return o;
}

json::object to_json(const ExecRecord& e) {
  json::object o;
  o["id"] = e.id;
  o["session_id"] = e.session_id;
  if (e.cmd.empty()) {
    json::array argv;
    for (const auto& arg : e.argv) argv.emplace_back(arg);
    o["argv"] = std::move(argv);
  } else {
    o["cmd"] = e.cmd;
  }
  o["cwd"] = e.cwd;
  o["user"] = e.user;
  o["state"] = e.state;
  o["exit_code"] = int_or_null(e.exit_code);
  o["signal"] = int_or_null(e.signal);
  o["reason"] = text_or_null(e.reason);
  o["started_at"] = e.started_at;
  o["ended_at"] = text_or_null(e.ended_at);
  o["duration_ms"] = int_or_null(e.duration_ms);
  o["cpu_ms"] = int_or_null(e.cpu_ms);
  o["peak_memory_bytes"] = int_or_null(e.peak_memory_bytes);
  o["stdout_bytes"] = e.stdout_bytes;
  o["stderr_bytes"] = e.stderr_bytes;
  o["output_truncated"] = e.output_truncated;
  o["partial"] = e.partial;
  return o;
}

json::object to_json(const TenantRecord& t) {
  json::object quotas;
  quotas["max_sessions"] = t.quotas.max_sessions;
  quotas["max_memory_mb"] = t.quotas.max_memory_mb;
  quotas["max_cpus"] = t.quotas.max_cpus;
  json::object o;
  o["id"] = t.id;
  o["name"] = t.name;
  o["quotas"] = std::move(quotas);
  o["created_at"] = t.created_at;
  return o;
}

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

std::string new_id(std::string_view prefix) {
  std::array<unsigned char, 8> bytes{};
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    std::fputs("cela: RAND_bytes failed; refusing to issue ids without entropy\n", stderr);
    std::abort();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  id += '-';
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 0xf];
  }
  return id;
}

}  // namespace cela::store
