// The daemon's log: one JSON object per line on stderr,
//   {"ts":"2026-12-01T15:00:00.123Z","level":"info","msg":"...", ...fields}
// with the request id (`request_id`), session and exec ids as fields where they apply,
// and one access line per HTTP answer (`"msg":"access"`, method, route, path, status,
// duration_ms, tenant, request_id). Lines are written with one write(2) each, so lines
// of concurrent threads never interleave.
//
// Until json_logs(true) (cela serve), lines keep the plain "cela: msg" form the
// one-shot commands print.
#pragma once

#include <boost/json/object.hpp>
#include <optional>
#include <string_view>

namespace cela::obs {

enum class Level { debug, info, warn, error };
std::string_view to_string(Level level);
std::optional<Level> parse_level(std::string_view text);

void json_logs(bool on);
bool json_logs();
// Lines below `level` are dropped (default info).
void log_level(Level level);

void log(Level level, std::string_view msg, const boost::json::object& fields = {});
inline void info(std::string_view msg, const boost::json::object& fields = {}) { log(Level::info, msg, fields); }
inline void warn(std::string_view msg, const boost::json::object& fields = {}) { log(Level::warn, msg, fields); }
inline void error(std::string_view msg, const boost::json::object& fields = {}) { log(Level::error, msg, fields); }

// The text of one line (no newline), for tests.
std::string format_line(Level level, std::string_view msg, const boost::json::object& fields);

}  // namespace cela::obs
