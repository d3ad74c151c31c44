#include "session/config.h"

#include <boost/json.hpp>

#include "common/fs.h"

namespace cela::session {
namespace json = boost::json;
namespace {

// Reads `key` of `object` into `out` when present; the type must match.
template <class T>
Result<void> take(const json::object& object, std::string_view key, T& out, std::string_view where) {
  const json::value* v = object.if_contains(key);
  if (!v) return {};
  auto bad = [&] { return fail(ErrorCode::invalid_argument, "config: " + std::string(where) + std::string(key) + " has the wrong type"); };
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v->is_string()) return bad();
    out = std::string(v->as_string());
  } else if constexpr (std::is_same_v<T, double>) {
    if (!v->is_number()) return bad();
    out = v->to_number<double>();
  } else {
    if (!v->is_number()) return bad();
    try {
      out = v->to_number<T>();
    } catch (const std::exception&) {
      return bad();
    }
  }
  return {};
}

Result<void> only_keys(const json::object& object, std::initializer_list<std::string_view> keys,
                       std::string_view where) {
  for (const auto& kv : object) {
    bool known = false;
    for (auto k : keys) known = known || kv.key() == k;
    if (!known) return fail(ErrorCode::invalid_argument, "config: unknown key " + std::string(where) + std::string(kv.key()));
  }
  return {};
}

#define TAKE(obj, key, field, where) \
  if (auto r = take(obj, key, field, where); !r) return std::unexpected(r.error())

}  // namespace

Result<DaemonConfig> DaemonConfig::from_json(const json::object& o) {
  DaemonConfig c;
  if (auto r = only_keys(o, {"state_dir", "templates_dir", "socket", "listen", "default_template", "max_sessions",
                             "output_cap_bytes", "max_body_bytes", "max_upload_bytes", "http_threads",
                             "blocking_threads", "defaults", "maxima", "tenant_quotas", "output_retention",
                             "stdin_timeout_s", "uid_slots"},
                         "");
      !r)
    return std::unexpected(r.error());
  TAKE(o, "state_dir", c.state_dir, "");
  TAKE(o, "templates_dir", c.templates_dir, "");
  TAKE(o, "socket", c.socket_path, "");
  TAKE(o, "listen", c.listen, "");
  TAKE(o, "default_template", c.default_template, "");
  TAKE(o, "max_sessions", c.max_sessions, "");
  TAKE(o, "output_cap_bytes", c.output_cap_bytes, "");
  TAKE(o, "max_body_bytes", c.max_body_bytes, "");
  TAKE(o, "max_upload_bytes", c.max_upload_bytes, "");
  TAKE(o, "http_threads", c.http_threads, "");
  TAKE(o, "blocking_threads", c.blocking_threads, "");
  TAKE(o, "stdin_timeout_s", c.stdin_timeout_s, "");
  TAKE(o, "uid_slots", c.uid_slots, "");
  auto section = [&](std::string_view key) -> Result<const json::object*> {
    const json::value* v = o.if_contains(key);
    if (!v) return nullptr;
    if (!v->is_object()) return fail(ErrorCode::invalid_argument, "config: " + std::string(key) + " must be an object");
    return &v->as_object();
  };
  auto d = section("defaults");
  if (!d) return std::unexpected(d.error());
  if (*d) {
    const json::object& s = **d;
    if (auto r = only_keys(s, {"cpus", "memory_mb", "disk_mb", "pids", "ttl_s", "idle_timeout_s", "exec_timeout_s"},
                           "defaults.");
        !r)
      return std::unexpected(r.error());
    TAKE(s, "cpus", c.defaults.cpus, "defaults.");
    TAKE(s, "memory_mb", c.defaults.memory_mb, "defaults.");
    TAKE(s, "disk_mb", c.defaults.disk_mb, "defaults.");
    TAKE(s, "pids", c.defaults.pids, "defaults.");
    TAKE(s, "ttl_s", c.defaults.ttl_s, "defaults.");
    TAKE(s, "idle_timeout_s", c.defaults.idle_timeout_s, "defaults.");
    TAKE(s, "exec_timeout_s", c.defaults.exec_timeout_s, "defaults.");
  }
  auto m = section("maxima");
  if (!m) return std::unexpected(m.error());
  if (*m) {
    const json::object& s = **m;
    if (auto r = only_keys(s, {"cpus", "memory_mb", "disk_mb", "pids", "ttl_s", "exec_timeout_s"}, "maxima."); !r)
      return std::unexpected(r.error());
    TAKE(s, "cpus", c.maxima.cpus, "maxima.");
    TAKE(s, "memory_mb", c.maxima.memory_mb, "maxima.");
    TAKE(s, "disk_mb", c.maxima.disk_mb, "maxima.");
    TAKE(s, "pids", c.maxima.pids, "maxima.");
    TAKE(s, "ttl_s", c.maxima.ttl_s, "maxima.");
    TAKE(s, "exec_timeout_s", c.maxima.exec_timeout_s, "maxima.");
  }
  auto q = section("tenant_quotas");
  if (!q) return std::unexpected(q.error());
  if (*q) {
    const json::object& s = **q;
    if (auto r = only_keys(s, {"max_sessions", "max_memory_mb", "max_cpus"}, "tenant_quotas."); !r)
      return std::unexpected(r.error());
    TAKE(s, "max_sessions", c.quotas.max_sessions, "tenant_quotas.");
    TAKE(s, "max_memory_mb", c.quotas.max_memory_mb, "tenant_quotas.");
    TAKE(s, "max_cpus", c.quotas.max_cpus, "tenant_quotas.");
  }
  auto ret = section("output_retention");
  if (!ret) return std::unexpected(ret.error());
  if (*ret) {
    const json::object& s = **ret;
    if (auto r = only_keys(s, {"days"}, "output_retention."); !r) return std::unexpected(r.error());
    TAKE(s, "days", c.output_retention_days, "output_retention.");
  }
  if (c.uid_slots < 1 || c.uid_slots > 4096) return fail(ErrorCode::invalid_argument, "config: uid_slots must be 1..4096");
  if (c.output_retention_days < 0) return fail(ErrorCode::invalid_argument, "config: output_retention.days must be >= 0");
  if (c.max_sessions < 1) return fail(ErrorCode::invalid_argument, "config: max_sessions must be >= 1");
  if (c.http_threads < 1 || c.blocking_threads < 1)
    return fail(ErrorCode::invalid_argument, "config: thread counts must be >= 1");
  return c;
}

Result<DaemonConfig> DaemonConfig::load(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  boost::system::error_code ec;
  json::value v = json::parse(*text, ec);
  if (ec || !v.is_object()) return fail(ErrorCode::invalid_argument, "config " + path + ": not a JSON object");
  return from_json(v.as_object());
}

}  // namespace cela::session
