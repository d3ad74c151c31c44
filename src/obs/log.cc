#include "obs/log.h"

#include <unistd.h>

#include <atomic>
#include <boost/json/value.hpp>

#include "common/json_text.h"
#include "common/time.h"

namespace cela::obs {
namespace {
std::atomic<bool> g_json{false};
std::atomic<int> g_level{static_cast<int>(Level::info)};
}  // namespace

std::string_view to_string(Level level) {
  switch (level) {
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
  }
  return "info";
}

void json_logs(bool on) { g_json = on; }
bool json_logs() { return g_json.load(); }
std::optional<Level> parse_level(std::string_view text) {
  for (Level l : {Level::debug, Level::info, Level::warn, Level::error})
    if (to_string(l) == text) return l;
  return std::nullopt;
}

void log_level(Level level) { g_level = static_cast<int>(level); }

std::string format_line(Level level, std::string_view msg, const boost::json::object& fields) {
  if (!g_json.load()) {
    std::string line = "cela: ";
    line += msg;
    for (const auto& kv : fields) {
      line += ' ';
      line += kv.key();
      line += '=';
      line += kv.value().is_string() ? std::string(kv.value().as_string()) : json_text(kv.value());
    }
    return line;
  }
  boost::json::object o;
  o["ts"] = now_rfc3339();
  o["level"] = to_string(level);
  o["msg"] = msg;
  for (const auto& kv : fields)
    if (kv.key() != "ts" && kv.key() != "level" && kv.key() != "msg") o[kv.key()] = kv.value();
  return json_text(o);
}

void log(Level level, std::string_view msg, const boost::json::object& fields) {
  if (static_cast<int>(level) < g_level.load()) return;
  std::string line = format_line(level, msg, fields);
  line += '\n';
  // One write: concurrent lines never interleave (stderr is unbuffered, but fprintf
  // may split a long line into several writes).
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace cela::obs
