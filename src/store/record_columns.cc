#include "store/record_columns.h"

#include <boost/json.hpp>

#include "common/json_fields.h"

namespace cela::store {
namespace json = boost::json;

namespace {

// A stored column that does not read back is corruption, not a bad request.
Error corrupt(std::string_view column, const Error& e) {
  return Error{ErrorCode::internal, 0, "stored " + std::string(column) + " is corrupt: " + e.message()};
}

template <class T, class Read>
Result<T> read_column(std::string_view text, std::string_view column, Read read) {
  T out;
  if (text.empty()) return out;
  auto object = parse_json_object(text, column);
  if (!object) return std::unexpected(corrupt(column, object.error()));
  if (auto r = read(JsonFields(*object), out); !r) return std::unexpected(corrupt(column, r.error()));
  return out;
}

template <class T>
Result<void> set_if(Result<std::optional<T>> field, auto& target) {
  if (!field) return std::unexpected(field.error());
  if (*field) target = static_cast<std::remove_reference_t<decltype(target)>>(**field);
  return {};
}

}  // namespace

std::string limits_column(const SessionLimits& l) {
  return json::serialize(json::object{{"cpus", l.cpus},
                                      {"memory_mb", l.memory_mb},
                                      {"disk_mb", l.disk_mb},
                                      {"pids", l.pids},
                                      {"ttl_s", l.ttl_s},
                                      {"idle_timeout_s", l.idle_timeout_s},
                                      {"exec_timeout_s", l.exec_timeout_s}});
}

Result<SessionLimits> read_limits_column(std::string_view text) {
  return read_column<SessionLimits>(text, "limits", [](const JsonFields& f, SessionLimits& l) -> Result<void> {
    if (auto r = set_if(f.number("cpus"), l.cpus); !r) return r;
    for (auto [key, target] : {std::pair{"memory_mb", &l.memory_mb}, std::pair{"disk_mb", &l.disk_mb},
                               std::pair{"pids", &l.pids}, std::pair{"ttl_s", &l.ttl_s},
                               std::pair{"idle_timeout_s", &l.idle_timeout_s},
                               std::pair{"exec_timeout_s", &l.exec_timeout_s}})
      if (auto r = set_if(f.integer(key), *target); !r) return r;
    return {};
  });
}

std::string network_column(const NetworkPolicy& n) {
  json::array allow;
  for (const auto& a : n.allow) allow.emplace_back(a);
  json::object o{{"mode", n.mode}};
  if (!n.allow.empty()) o["allow"] = std::move(allow);
  if (!n.deny.empty()) {
    json::array deny;
    for (const auto& d : n.deny) deny.emplace_back(d);
    o["deny"] = std::move(deny);
  }
  return json::serialize(o);
}

Result<NetworkPolicy> read_network_column(std::string_view text) {
  return read_column<NetworkPolicy>(text, "network", [](const JsonFields& f, NetworkPolicy& n) -> Result<void> {
    if (auto r = set_if(f.string("mode"), n.mode); !r) return r;
    if (auto r = set_if(f.string_array("deny"), n.deny); !r) return r;
    return set_if(f.string_array("allow"), n.allow);
  });
}

std::string spec_column(const KeptSpec& s) {
  json::object o{{"template", s.template_name}, {"allow_sudo", s.allow_sudo}};
  if (!s.disk_kind.empty()) o["disk_kind"] = s.disk_kind;
  if (!s.volumes.empty()) {
    json::array volumes;
    for (const auto& v : s.volumes) volumes.push_back(json::object{{"name", v.name}, {"path", v.path}, {"read_only", v.read_only}});
    o["volumes"] = std::move(volumes);
  }
  if (s.auto_pause_s) o["auto_pause_s"] = s.auto_pause_s;
  if (s.auto_resume) o["auto_resume"] = true;
  if (s.pause_at_ttl) o["pause_at_ttl"] = true;
  return json::serialize(o);
}

Result<KeptSpec> read_spec_column(std::string_view text) {
  return read_column<KeptSpec>(text, "spec", [](const JsonFields& f, KeptSpec& s) -> Result<void> {
    if (auto r = set_if(f.string("template"), s.template_name); !r) return r;
    if (auto r = set_if(f.string("disk_kind"), s.disk_kind); !r) return r;
    if (const auto* volumes = f.raw().if_contains("volumes"); volumes && volumes->is_array()) {
      for (const auto& v : volumes->as_array()) {
        if (!v.is_object()) return fail(ErrorCode::invalid_argument, "volumes entry is not an object");
        JsonFields vf(v.as_object());
        VolumeMountSpec m;
        if (auto r = set_if(vf.string("name"), m.name); !r) return r;
        if (auto r = set_if(vf.string("path"), m.path); !r) return r;
        if (auto r = set_if(vf.boolean("read_only"), m.read_only); !r) return r;
        s.volumes.push_back(std::move(m));
      }
    }
    if (auto r = set_if(f.integer("auto_pause_s"), s.auto_pause_s); !r) return r;
    if (auto r = set_if(f.boolean("auto_resume"), s.auto_resume); !r) return r;
    if (auto r = set_if(f.boolean("pause_at_ttl"), s.pause_at_ttl); !r) return r;
    return set_if(f.boolean("allow_sudo"), s.allow_sudo);
  });
}

std::string cleanup_column(const CleanupReport& c) {
  json::object o{{"cgroup_removed", c.cgroup_removed},
                 {"mounts_removed", c.mounts_removed},
                 {"upper_dir_freed", c.upper_dir_freed},
                 {"secrets_wiped", c.secrets_wiped}};
  if (c.processes_killed) o["processes_killed"] = *c.processes_killed;
  if (c.disk_used_bytes) o["disk_used_bytes"] = *c.disk_used_bytes;
  if (c.disk_written_bytes) o["disk_written_bytes"] = *c.disk_written_bytes;
  if (c.loop_detached) o["loop_detached"] = *c.loop_detached;
  if (c.volumes_released) o["volumes_released"] = c.volumes_released;
  if (!c.error.empty()) o["error"] = c.error;
  return json::serialize(o);
}

Result<CleanupReport> read_cleanup_column(std::string_view text) {
  return read_column<CleanupReport>(text, "cleanup", [](const JsonFields& f, CleanupReport& c) -> Result<void> {
    std::optional<int64_t> killed;
    if (auto r = set_if(f.integer("processes_killed"), killed); !r) return r;
    if (killed) c.processes_killed = static_cast<uint64_t>(*killed);
    if (auto r = set_if(f.integer("secrets_wiped"), c.secrets_wiped); !r) return r;
    std::optional<int64_t> used, written;
    if (auto r = set_if(f.integer("disk_used_bytes"), used); !r) return r;
    if (auto r = set_if(f.integer("disk_written_bytes"), written); !r) return r;
    if (used) c.disk_used_bytes = static_cast<uint64_t>(*used);
    if (written) c.disk_written_bytes = static_cast<uint64_t>(*written);
    std::optional<bool> detached;
    if (auto r = set_if(f.boolean("loop_detached"), detached); !r) return r;
    c.loop_detached = detached;
    if (auto r = set_if(f.integer("volumes_released"), c.volumes_released); !r) return r;
    for (auto [key, target] : {std::pair{"cgroup_removed", &c.cgroup_removed},
                               std::pair{"mounts_removed", &c.mounts_removed},
                               std::pair{"upper_dir_freed", &c.upper_dir_freed}})
      if (auto r = set_if(f.boolean(key), *target); !r) return r;
    return set_if(f.string("error"), c.error);
  });
}

}  // namespace cela::store
