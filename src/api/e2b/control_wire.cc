// The control plane's translation (control.h): E2B's bodies and query values to the
// native ones, session records to E2B's objects. No I/O.
#include <boost/json.hpp>
#include <boost/url/decode_view.hpp>
#include <boost/url/parse_query.hpp>
#include <algorithm>
#include <cmath>

#include "api/e2b/control.h"
#include "api/e2b/envd_version.h"
#include "api/json_body.h"
#include "api/session_specs.h"

namespace cela::api::e2b {
namespace json = boost::json;

namespace {

constexpr std::string_view kClientId = "cela";

Error invalid(std::string message) { return Error{ErrorCode::invalid_argument, 0, std::move(message)}; }

// An E2B egress entry (an IP, a CIDR or a host name, for every port) as a cela rule:
// E2B's entries carry no port, cela's allow rules without one mean 80 and 443.
std::string egress_rule(const std::string& entry) {
  // IPv6 (with or without a prefix length) goes in brackets, as cela writes it.
  if (entry.find(':') != std::string::npos && entry.front() != '[') return "[" + entry + "]:*";
  return entry + ":*";
}

// allow_internet_access and network.{allowOut, denyOut} -> the native `network`.
// cela stays default-deny: without an explicit yes there is no network.
Result<std::optional<json::object>> network_of(const JsonFields& f) {
  auto internet = f.boolean("allow_internet_access");
  if (!internet) return std::unexpected(internet.error());
  auto network = f.object("network");
  if (!network) return std::unexpected(network.error());
  std::vector<std::string> allow, deny;
  if (*network) {
    const JsonFields& n = **network;
    for (std::string_view unsupported : {"rules", "egressProxy", "maskRequestHost", "httpsPorts"}) {
      auto* v = n.raw().if_contains(unsupported);
      if (v && !v->is_null())
        return std::unexpected(invalid("field `network." + std::string(unsupported) + "` is not supported by cela"));
    }
    auto allow_public = n.boolean("allowPublicTraffic");  // cela always wants the traffic token
    if (!allow_public) return std::unexpected(allow_public.error());
    auto a = n.string_array("allowOut");
    if (!a) return std::unexpected(a.error());
    auto d = n.string_array("denyOut");
    if (!d) return std::unexpected(d.error());
    for (const auto& e : a->value_or(std::vector<std::string>{})) allow.push_back(egress_rule(e));
    for (const auto& e : d->value_or(std::vector<std::string>{})) deny.push_back(egress_rule(e));
  }
  // allowOut opens what it names (with or without allow_internet_access: everything
  // else stays closed either way); allow_internet_access alone opens every host.
  if (allow.empty()) {
    if (!internet->value_or(false)) return std::optional<json::object>();
    allow.push_back("*:*");
  }
  json::array allow_json, deny_json;
  for (auto& r : allow) allow_json.emplace_back(r);
  for (auto& r : deny) deny_json.emplace_back(r);
  json::object out{{"mode", "allowlist"}, {"allow", std::move(allow_json)}};
  if (!deny_json.empty()) out["deny"] = std::move(deny_json);
  return std::optional<json::object>(std::move(out));
}

// Top-level nulls read as absent (some SDKs send them for unset options).
json::object without_nulls(const json::object& body) {
  json::object out;
  for (const auto& kv : body)
    if (!kv.value().is_null()) out[kv.key()] = kv.value();
  return out;
}

int64_t cpu_count(double cpus) { return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cpus))); }

constexpr uint64_t kMiB = 1024 * 1024;

}  // namespace

Result<std::optional<uint64_t>> parse_timeout(const json::object& body, const session::DaemonConfig& config,
                                              bool required) {
  JsonFields f(body);
  auto t = f.number("timeout");
  if (!t) return std::unexpected(t.error());
  if (!*t) {
    if (required) return std::unexpected(invalid("field `timeout` is required"));
    return std::optional<uint64_t>();
  }
  double v = **t;
  if (v < 1 || v != std::floor(v) || v > static_cast<double>(config.maxima.ttl_s))
    return std::unexpected(invalid("field `timeout` must be a whole number of seconds from 1 to this server's "
                                   "maximum of " + std::to_string(config.maxima.ttl_s)));
  return std::optional<uint64_t>(static_cast<uint64_t>(v));
}

Result<json::object> native_create_body(const json::object& raw, const session::DaemonConfig& config) {
  json::object body = without_nulls(raw);
  JsonFields f(body);
  for (std::string_view unsupported : {"mcp", "iam"}) {
    auto* v = body.if_contains(unsupported);
    if (v && !(v->is_object() && v->as_object().empty()))
      return std::unexpected(invalid("field `" + std::string(unsupported) + "` is not supported by cela"));
  }
  json::object native;
  auto tmpl = f.string("templateID");
  if (!tmpl) return std::unexpected(tmpl.error());
  native["template"] = tmpl->value_or("base");
  auto timeout = parse_timeout(body, config, false);
  if (!timeout) return std::unexpected(timeout.error());
  native["limits"] = json::object{{"ttl_s", timeout->value_or(std::min(kDefaultTimeoutS, config.maxima.ttl_s))}};
  if (auto* env = body.if_contains("envVars")) native["env"] = *env;
  if (auto* metadata = body.if_contains("metadata")) native["metadata"] = *metadata;
  auto network = network_of(f);
  if (!network) return std::unexpected(network.error());
  if (*network) native["network"] = std::move(**network);
  auto resume = f.object("autoResume");
  if (!resume) return std::unexpected(resume.error());
  if (*resume) {
    auto enabled = (*resume)->boolean("enabled");
    if (!enabled) return std::unexpected(enabled.error());
    if (enabled->value_or(false)) native["auto_resume"] = true;
  }
  auto mounts = f.array("volumeMounts");
  if (!mounts) return std::unexpected(mounts.error());
  if (*mounts) {
    json::array volumes;
    for (const auto& m : **mounts) {
      if (!m.is_object()) return std::unexpected(invalid("field `volumeMounts` must be an array of {name, path}"));
      JsonFields mf(m.as_object(), "volumeMounts[]");
      auto name = mf.require_string("name");
      if (!name) return std::unexpected(name.error());
      auto path = mf.require_string("path");
      if (!path) return std::unexpected(path.error());
      volumes.push_back(json::object{{"name", *name}, {"path", *path}});
    }
    native["volumes"] = std::move(volumes);
  }
  // Checked for their type only: `secure` (tokens are always issued and checked) and
  // autoPauseMemory (a cela pause always keeps memory).
  for (std::string_view flag : {"secure", "autoPause", "autoPauseMemory"})
    if (auto b = f.boolean(flag); !b) return std::unexpected(b.error());
  return native;
}

Result<session::CreateSessionSpec> parse_new_sandbox(const json::object& raw, const session::DaemonConfig& config) {
  auto native = native_create_body(raw, config);
  if (!native) return std::unexpected(native.error());
  auto spec = parse_create_session(*native, config);
  if (!spec) return std::unexpected(spec.error());
  JsonFields f(raw);
  auto pause = f.boolean("autoPause");
  if (!pause) return std::unexpected(pause.error());
  spec->pause_at_ttl = pause->value_or(false);
  // E2B sandboxes live until their timeout whatever they do: no idle timeout, and a
  // process may run as long as the sandbox does (up to the server's exec maximum).
  spec->limits.idle_timeout_s = 0;
  spec->limits.exec_timeout_s = config.maxima.exec_timeout_s;
  return spec;
}

std::string_view sandbox_state(std::string_view session_state) {
  return session_state == store::session_state::paused ? "paused" : "running";
}

Result<std::vector<std::string>> session_states_of(const std::vector<std::string_view>& states) {
  bool running = false, paused = false;
  for (std::string_view list : states) {
    while (!list.empty()) {
      auto comma = list.find(',');
      std::string_view one = list.substr(0, comma);
      list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      if (one == "running") running = true;
      else if (one == "paused") paused = true;
      else if (!one.empty()) return std::unexpected(invalid("query `state` must be running and/or paused, not `" +
                                                              std::string(one) + "`"));
    }
  }
  if (!running && !paused) running = paused = true;
  std::vector<std::string> out;
  if (running)
    for (auto s : {store::session_state::starting, store::session_state::ready, store::session_state::running})
      out.emplace_back(s);
  if (paused) out.emplace_back(store::session_state::paused);
  return out;
}

Result<std::map<std::string, std::string>> parse_metadata_filter(std::string_view value) {
  std::map<std::string, std::string> out;
  auto query = boost::urls::parse_query(value);
  if (!query) return std::unexpected(invalid("query `metadata` is not form-encoded key=value pairs"));
  // The JS SDK encodes each key and value once before form-encoding the pairs: undo
  // both (a value that is not valid percent-encoding the second time stays as it is).
  auto once_more = [](std::string s) {
    auto pct = boost::urls::make_pct_string_view(s);
    if (!pct) return s;
    std::string decoded;
    for (char c : pct->decode()) decoded.push_back(c);
    return decoded;
  };
  boost::urls::encoding_opts opts;
  opts.space_as_plus = true;
  for (auto it = query->begin(); it != query->end(); ++it) {
    auto p = *it;
    if (!p.has_value) return std::unexpected(invalid("query `metadata`: `" + std::string(p.key) + "` has no value"));
    std::string key, val;
    for (char c : p.key.decode(opts)) key.push_back(c);
    for (char c : p.value.decode(opts)) val.push_back(c);
    key = once_more(std::move(key));
    if (key.empty()) continue;
    out[key] = once_more(std::move(val));
  }
  return out;
}

json::object render_sandbox(const store::SessionRecord& r, const SandboxTokens& tokens) {
  return json::object{{"templateID", r.spec.template_name},
                      {"sandboxID", r.id},
                      {"alias", r.spec.template_name},
                      {"clientID", kClientId},
                      {"envdVersion", kEnvdVersion},
                      {"envdAccessToken", tokens.issue(TokenKind::envd, r.tenant_id, r.id)},
                      {"trafficAccessToken", tokens.issue(TokenKind::traffic, r.tenant_id, r.id)},
                      {"domain", nullptr}};
}

json::object render_listed(const store::SessionRecord& r) {
  json::object metadata;
  for (const auto& [k, v] : r.metadata) metadata[k] = v;
  json::array mounts;
  for (const auto& v : r.spec.volumes) mounts.push_back(json::object{{"name", v.name}, {"path", v.path}});
  return json::object{{"templateID", r.spec.template_name},
                      {"alias", r.spec.template_name},
                      {"sandboxID", r.id},
                      {"clientID", kClientId},
                      {"startedAt", r.created_at},
                      {"endAt", r.expires_at},
                      {"cpuCount", cpu_count(r.limits.cpus)},
                      {"memoryMB", r.limits.memory_mb},
                      {"diskSizeMB", r.limits.disk_mb},
                      {"metadata", std::move(metadata)},
                      {"state", sandbox_state(r.state)},
                      {"envdVersion", kEnvdVersion},
                      {"volumeMounts", std::move(mounts)}};
}

json::object render_detail(const store::SessionRecord& r, const SandboxTokens& tokens) {
  json::object o = render_listed(r);
  o["envdAccessToken"] = tokens.issue(TokenKind::envd, r.tenant_id, r.id);
  o["domain"] = nullptr;
  const bool open = r.network.mode == "allowlist";
  o["allowInternetAccess"] = open;
  json::object network;
  if (open) {
    json::array allow, deny;
    for (const auto& a : r.network.allow) allow.emplace_back(a);
    for (const auto& d : r.network.deny) deny.emplace_back(d);
    network["allowOut"] = std::move(allow);
    network["denyOut"] = std::move(deny);
  }
  network["allowPublicTraffic"] = false;  // the data plane always wants the sandbox's token
  o["network"] = std::move(network);
  o["lifecycle"] = json::object{{"onTimeout", r.spec.pause_at_ttl ? "pause" : "kill"},
                                {"autoResume", r.spec.auto_resume}};
  return o;
}

json::array render_metrics(const session::SessionMetrics& m, const store::SessionLimits& limits, int64_t now_ms) {
  struct Point {
    int64_t at_ms;
    uint64_t cpu_ms, memory_bytes, disk_used_bytes;
  };
  std::vector<Point> points;
  for (const auto& s : m.history) points.push_back({s.at_ms, s.cpu_ms, s.memory_bytes, s.disk_used_bytes});
  if (m.live && (points.empty() || points.back().at_ms < now_ms))
    points.push_back({now_ms, m.cpu_ms, m.memory_bytes, m.disk_used_bytes.value_or(0)});
  const double cpus = limits.cpus > 0 ? limits.cpus : 1;
  json::array out;
  // The first point measures from the session's start (CPU 0 at wall 0).
  Point prev{now_ms - static_cast<int64_t>(m.wall_ms), 0, 0, 0};
  for (const Point& p : points) {
    double wall = static_cast<double>(p.at_ms - prev.at_ms);
    double used = p.cpu_ms >= prev.cpu_ms ? static_cast<double>(p.cpu_ms - prev.cpu_ms) : 0;
    double pct = wall > 0 ? std::clamp(used / wall / cpus * 100.0, 0.0, 100.0) : 0.0;
    out.push_back(json::object{{"timestamp", store::format_rfc3339(p.at_ms)},
                               {"timestampUnix", p.at_ms / 1000},
                               {"cpuCount", cpu_count(limits.cpus)},
                               {"cpuUsedPct", std::round(pct * 100) / 100},
                               {"memUsed", p.memory_bytes},
                               {"memTotal", limits.memory_mb * kMiB},
                               {"memCache", 0},
                               {"diskUsed", p.disk_used_bytes},
                               {"diskTotal", limits.disk_mb * kMiB}});
    prev = p;
  }
  return out;
}

}  // namespace cela::api::e2b
