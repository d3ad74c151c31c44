// API JSON of the records the session layer hands out (the object shapes of API.md).
// The store stores records; only the API renders them.
#include "api/render.h"

#include "common/encoding.h"

namespace cela::api {
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

}  // namespace

json::object render(const session::SessionLimits& l) {
  return {{"cpus", l.cpus},
          {"memory_mb", l.memory_mb},
          {"disk_mb", l.disk_mb},
          {"pids", l.pids},
          {"ttl_s", l.ttl_s},
          {"idle_timeout_s", l.idle_timeout_s},
          {"exec_timeout_s", l.exec_timeout_s}};
}

json::object render(const session::SessionRecord& s) {
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
  o["limits"] = render(s.limits);
  json::object network{{"mode", s.network.mode}};
  if (!s.network.allow.empty()) {
    json::array allow;
    for (const auto& a : s.network.allow) allow.emplace_back(a);
    network["allow"] = std::move(allow);
  }
  if (!s.network.deny.empty()) {
    json::array deny;
    for (const auto& d : s.network.deny) deny.emplace_back(d);
    network["deny"] = std::move(deny);
  }
  o["network"] = std::move(network);
  o["created_at"] = s.created_at;
  o["ready_at"] = text_or_null(s.ready_at);
  o["expires_at"] = text_or_null(s.expires_at);
  o["metadata"] = std::move(metadata);
  o["termination"] = std::move(termination);
  o["startup_ms"] = int_or_null(s.startup_ms);
  // The writable layer (records older than disk kinds had a tmpfs).
  o["disk"] = json::object{{"kind", s.spec.disk_kind.empty() ? "memory" : s.spec.disk_kind}};
  o["disk_used_bytes"] = s.disk_used_bytes ? json::value(*s.disk_used_bytes) : json::value(nullptr);
  o["disk_written_bytes"] = s.disk_written_bytes ? json::value(*s.disk_written_bytes) : json::value(nullptr);
  json::array volumes;
  for (const auto& v : s.spec.volumes)
    volumes.push_back(json::object{{"name", v.name}, {"path", v.path}, {"read_only", v.read_only}});
  o["volumes"] = std::move(volumes);
  o["resets"] = s.resets;
  o["auto_pause_s"] = s.spec.auto_pause_s;
  o["auto_resume"] = s.spec.auto_resume;
  if (s.cleanup) {
    const session::CleanupReport& c = *s.cleanup;
    json::object cleanup{{"cgroup_removed", c.cgroup_removed},
                         {"mounts_removed", c.mounts_removed},
                         {"upper_dir_freed", c.upper_dir_freed},
                         {"secrets_wiped", c.secrets_wiped}};
    if (c.processes_killed) cleanup["processes_killed"] = *c.processes_killed;  // unknown after a restart
    if (c.loop_detached) cleanup["loop_detached"] = *c.loop_detached;
    if (c.disk_used_bytes) cleanup["disk_used_bytes"] = *c.disk_used_bytes;
    if (c.disk_written_bytes) cleanup["disk_written_bytes"] = *c.disk_written_bytes;
    cleanup["volumes_released"] = c.volumes_released;
    if (!c.error.empty()) cleanup["error"] = c.error;
    o["cleanup"] = std::move(cleanup);
  }
  return o;
}

json::object render(const session::ExecRecord& e) {
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
  o["pid"] = e.pid > 0 ? json::value(e.pid) : json::value(nullptr);
  o["exit_code"] = int_or_null(e.exit_code);
  o["signal"] = int_or_null(e.signal);
  o["reason"] = text_or_null(e.reason);
  o["started_at"] = e.started_at;
  o["ended_at"] = text_or_null(e.ended_at);
  o["duration_ms"] = int_or_null(e.duration_ms);
  o["cpu_ms"] = int_or_null(e.cpu_ms);
  o["peak_memory_bytes"] = int_or_null(e.peak_memory_bytes);
  o["pids_peak"] = int_or_null(e.pids_peak);
  o["stdout_bytes"] = e.stdout_bytes;
  o["stderr_bytes"] = e.stderr_bytes;
  o["output_truncated"] = e.output_truncated;
  o["partial"] = e.partial;
  return o;
}

json::object render(const session::PackageInstallRecord& i) {
  return json::object{{"at", i.at},
                      {"manager", i.manager},
                      {"name", i.name},
                      {"version", i.version.empty() ? json::value(nullptr) : json::value(i.version)},
                      {"registry", i.registry},
                      {"sha256", i.sha256.empty() ? json::value(nullptr) : json::value(i.sha256)},
                      {"size", i.size},
                      {"verdict", i.verdict},
                      {"rule", i.rule},
                      {"reason", i.reason.empty() ? json::value(nullptr) : json::value(i.reason)},
                      {"cache", i.cache_hit ? "hit" : "miss"}};
}

json::object render(const session::TenantRecord& t) {
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

void set_name_field(json::object& o, std::string_view key, std::string_view bytes) {
  if (valid_utf8(bytes)) {
    o[key] = bytes;
    return;
  }
  o[key] = utf8_lossy(bytes);
  o[std::string(key) + "_b64"] = base64_encode(bytes);
}

}  // namespace cela::api
