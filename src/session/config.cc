// DaemonConfig from JSON, read with the one strict reader (common/json_fields.h):
// unknown keys and wrong types are errors naming the key ("config: field
// `maxima.cpus` must be a number").
#include "session/config.h"

#include "session/file_policy.h"

#include <cstdint>
#include <limits>
#include <type_traits>

#include "common/fs.h"
#include "common/json_fields.h"
#include "obs/log.h"
#include "runtime/jail.h"

namespace cela::session {
namespace json = boost::json;

namespace {

std::unexpected<Error> config_error(const Error& e) {
  return std::unexpected(Error{ErrorCode::invalid_argument, 0, "config: " + e.context});
}

// Reads `key` into `out` when present (absent keeps the default).
template <class T>
Result<void> take(const JsonFields& f, std::string_view key, T& out) {
  if constexpr (std::is_same_v<T, std::string>) {
    auto v = f.string(key);
    if (!v) return config_error(v.error());
    if (*v) out = **v;
  } else if constexpr (std::is_floating_point_v<T>) {
    auto v = f.number(key);
    if (!v) return config_error(v.error());
    if (*v) out = static_cast<T>(**v);
  } else {
    auto v = f.integer(key);
    if (!v) return config_error(v.error());
    if (*v) {
      if (**v < 0 || static_cast<uint64_t>(**v) > static_cast<uint64_t>(std::numeric_limits<T>::max()))
        return config_error(f.invalid(key, "is out of range"));
      out = static_cast<T>(**v);
    }
  }
  return {};
}

#define TAKE(fields, key, field) \
  if (auto r = take(fields, key, field); !r) return std::unexpected(r.error())
#define ONLY(fields, ...) \
  if (auto r = (fields).only({__VA_ARGS__}); !r) return config_error(r.error())

// `egress` (docs/operations.md "Egress").
template <class Section>
Result<void> read_egress(Section& section, net::EgressConfig& e) {
  auto eg = section("egress");
  if (!eg) return std::unexpected(eg.error());
  if (!*eg) return {};
  const JsonFields& s = **eg;
  ONLY(s, "allow_cidrs", "ca_file", "bandwidth_kbps", "max_connections", "hosts", "connect_timeout_s",
       "idle_timeout_s", "records_per_second", "record_burst");
  auto cidrs = s.string_array("allow_cidrs");
  if (!cidrs) return config_error(cidrs.error());
  if (*cidrs) e.allow_cidrs = **cidrs;
  for (const auto& c : e.allow_cidrs)
    if (!net::parse_cidr(c)) return fail(ErrorCode::invalid_argument, "config: egress.allow_cidrs: bad range `" + c + "`");
  TAKE(s, "ca_file", e.ca_file);
  TAKE(s, "bandwidth_kbps", e.bandwidth_kbps);
  TAKE(s, "max_connections", e.max_connections);
  TAKE(s, "connect_timeout_s", e.connect_timeout_s);
  TAKE(s, "idle_timeout_s", e.idle_timeout_s);
  TAKE(s, "records_per_second", e.records_per_second);
  TAKE(s, "record_burst", e.record_burst);
  if (!(e.records_per_second > 0) || !(e.record_burst >= 1))
    return fail(ErrorCode::invalid_argument,
                "config: egress.records_per_second must be above 0 and egress.record_burst at least 1");
  auto hosts = s.object("hosts");
  if (!hosts) return config_error(hosts.error());
  if (*hosts) {
    for (const auto& kv : (*hosts)->raw()) {
      std::string name(kv.key());
      auto list = (*hosts)->string_array(name);
      if (!list) return config_error(list.error());
      for (const auto& a : **list)
        if (!net::ip_literal(a))
          return fail(ErrorCode::invalid_argument, "config: egress.hosts." + name + ": `" + a + "` is not an address");
      e.hosts[net::normalise_host(name)] = **list;
    }
  }
  for (double t : {e.connect_timeout_s, e.idle_timeout_s})
    if (!(t > 0 && t <= 86400))
      return fail(ErrorCode::invalid_argument, "config: egress timeouts must be in (0, 86400] seconds");
  return {};
}

}  // namespace

Result<DaemonConfig> DaemonConfig::from_json(const json::object& o) {
  DaemonConfig c;
  JsonFields f(o);
  ONLY(f, "state_dir", "templates_dir", "socket", "listen", "default_template", "max_sessions", "output_cap_bytes",
       "max_body_bytes", "max_upload_bytes", "http_threads", "blocking_threads", "defaults", "maxima", "tenant_quotas",
       "output_retention", "stdin_timeout_s", "uid_slots", "launcher_threads", "exec_nofile", "connections",
       "session_budgets", "block_io", "admission", "dev_mode", "files", "disk", "volumes", "pools", "audit",
       "metrics", "logs", "egress", "packages", "ports");
  TAKE(f, "state_dir", c.state_dir);
  TAKE(f, "templates_dir", c.templates_dir);
  TAKE(f, "socket", c.socket_path);
  TAKE(f, "listen", c.listen);
  TAKE(f, "default_template", c.default_template);
  TAKE(f, "max_sessions", c.max_sessions);
  TAKE(f, "output_cap_bytes", c.output_cap_bytes);
  TAKE(f, "max_body_bytes", c.max_body_bytes);
  TAKE(f, "max_upload_bytes", c.max_upload_bytes);
  TAKE(f, "http_threads", c.http_threads);
  TAKE(f, "blocking_threads", c.blocking_threads);
  TAKE(f, "stdin_timeout_s", c.stdin_timeout_s);
  TAKE(f, "uid_slots", c.uid_slots);
  TAKE(f, "launcher_threads", c.launcher_threads);
  TAKE(f, "exec_nofile", c.exec_nofile);
  if (auto v = f.boolean("dev_mode"); !v) return config_error(v.error());
  else if (*v) c.dev_mode = **v;

  auto section = [&](std::string_view key) -> Result<std::optional<JsonFields>> {
    auto s = f.object(key);
    if (!s) return config_error(s.error());
    return *s;
  };
  auto d = section("defaults");
  if (!d) return std::unexpected(d.error());
  if (*d) {
    const JsonFields& s = **d;
    ONLY(s, "cpus", "memory_mb", "disk_mb", "pids", "ttl_s", "idle_timeout_s", "exec_timeout_s");
    TAKE(s, "cpus", c.defaults.cpus);
    TAKE(s, "memory_mb", c.defaults.memory_mb);
    TAKE(s, "disk_mb", c.defaults.disk_mb);
    TAKE(s, "pids", c.defaults.pids);
    TAKE(s, "ttl_s", c.defaults.ttl_s);
    TAKE(s, "idle_timeout_s", c.defaults.idle_timeout_s);
    TAKE(s, "exec_timeout_s", c.defaults.exec_timeout_s);
  }
  auto m = section("maxima");
  if (!m) return std::unexpected(m.error());
  if (*m) {
    const JsonFields& s = **m;
    ONLY(s, "cpus", "memory_mb", "disk_mb", "pids", "ttl_s", "exec_timeout_s");
    TAKE(s, "cpus", c.maxima.cpus);
    TAKE(s, "memory_mb", c.maxima.memory_mb);
    TAKE(s, "disk_mb", c.maxima.disk_mb);
    TAKE(s, "pids", c.maxima.pids);
    TAKE(s, "ttl_s", c.maxima.ttl_s);
    TAKE(s, "exec_timeout_s", c.maxima.exec_timeout_s);
  }
  auto q = section("tenant_quotas");
  if (!q) return std::unexpected(q.error());
  if (*q) {
    const JsonFields& s = **q;
    ONLY(s, "max_sessions", "max_memory_mb", "max_cpus");
    TAKE(s, "max_sessions", c.quotas.max_sessions);
    TAKE(s, "max_memory_mb", c.quotas.max_memory_mb);
    TAKE(s, "max_cpus", c.quotas.max_cpus);
  }
  auto files = section("files");
  if (!files) return std::unexpected(files.error());
  if (*files) {
    auto p = parse_file_policy(**files, c.files, /*narrow=*/false);
    if (!p) return config_error(p.error());
    c.files = std::move(*p);
  } else {
    c.files.max_upload_bytes = c.max_upload_bytes;
  }
  auto ret = section("output_retention");
  if (!ret) return std::unexpected(ret.error());
  if (*ret) {
    const JsonFields& s = **ret;
    ONLY(s, "days");
    TAKE(s, "days", c.output_retention_days);
  }
  auto b = section("session_budgets");
  if (!b) return std::unexpected(b.error());
  if (*b) {
    const JsonFields& s = **b;
    ONLY(s, "sigpending", "msgqueue_bytes", "memlock_bytes", "ptys", "user_namespace");
    TAKE(s, "sigpending", c.budgets.sigpending);
    TAKE(s, "msgqueue_bytes", c.budgets.msgqueue_bytes);
    TAKE(s, "memlock_bytes", c.budgets.memlock_bytes);
    TAKE(s, "ptys", c.budgets.ptys);
    auto u = s.object("user_namespace");
    if (!u) return config_error(u.error());
    if (*u) {
      for (const auto& kv : (*u)->raw()) {
        std::string name(kv.key());
        uint64_t value = 0;
        TAKE(**u, name, value);
        c.budgets.user_namespace[name] = value;
      }
    }
  }
  auto io = section("block_io");
  if (!io) return std::unexpected(io.error());
  if (*io) {
    const JsonFields& s = **io;
    ONLY(s, "weight", "read_bps", "write_bps", "read_iops", "write_iops", "devices");
    TAKE(s, "weight", c.block_io.weight);
    TAKE(s, "read_bps", c.block_io.read_bps);
    TAKE(s, "write_bps", c.block_io.write_bps);
    TAKE(s, "read_iops", c.block_io.read_iops);
    TAKE(s, "write_iops", c.block_io.write_iops);
    auto devices = s.string_array("devices");
    if (!devices) return config_error(devices.error());
    if (*devices) c.block_io.devices = **devices;
  }
  auto adm = section("admission");
  if (!adm) return std::unexpected(adm.error());
  if (*adm) {
    const JsonFields& s = **adm;
    ONLY(s, "overcommit", "host", "ledger_dir");
    TAKE(s, "ledger_dir", c.admission.ledger_dir);
    auto over = s.object("overcommit");
    if (!over) return config_error(over.error());
    if (*over) {
      ONLY(**over, "memory", "pids", "files");
      TAKE(**over, "memory", c.admission.memory_overcommit);
      TAKE(**over, "pids", c.admission.pids_overcommit);
      TAKE(**over, "files", c.admission.files_overcommit);
    }
    auto host = s.object("host");
    if (!host) return config_error(host.error());
    if (*host) {
      ONLY(**host, "memory_mb", "pids", "files");
      TAKE(**host, "memory_mb", c.admission.host_memory_mb);
      TAKE(**host, "pids", c.admission.host_pids);
      TAKE(**host, "files", c.admission.host_files);
    }
  }
  auto conn = section("connections");
  if (!conn) return std::unexpected(conn.error());
  if (*conn) {
    const JsonFields& s = **conn;
    ONLY(s, "max_total", "per_peer", "per_key", "root_reserve", "reserve_fds", "header_timeout_s", "idle_timeout_s",
         "ws_ping_s", "ws_queue_bytes");
    TAKE(s, "max_total", c.connections.max_total);
    TAKE(s, "per_peer", c.connections.per_peer);
    TAKE(s, "per_key", c.connections.per_key);
    TAKE(s, "root_reserve", c.connections.root_reserve);
    TAKE(s, "reserve_fds", c.connections.reserve_fds);
    TAKE(s, "header_timeout_s", c.connections.header_timeout_s);
    TAKE(s, "idle_timeout_s", c.connections.idle_timeout_s);
    TAKE(s, "ws_ping_s", c.connections.ws_ping_s);
    TAKE(s, "ws_queue_bytes", c.connections.ws_queue_bytes);
  }
  auto disk = section("disk");
  if (!disk) return std::unexpected(disk.error());
  if (*disk) {
    const JsonFields& s = **disk;
    ONLY(s, "kind", "pool", "dir");
    TAKE(s, "kind", c.disk.kind);
    TAKE(s, "pool", c.disk.pool);
    TAKE(s, "dir", c.disk.dir);
  }
  if (c.disk.kind != "disk" && c.disk.kind != "memory")
    return fail(ErrorCode::invalid_argument, "config: disk.kind must be \"disk\" or \"memory\"");
  if (c.disk.pool > 256) return fail(ErrorCode::invalid_argument, "config: disk.pool must be 0..256");
  auto vol = section("volumes");
  if (!vol) return std::unexpected(vol.error());
  if (*vol) {
    const JsonFields& s = **vol;
    ONLY(s, "dir", "max_size_mb", "max_per_tenant");
    TAKE(s, "dir", c.volumes.dir);
    TAKE(s, "max_size_mb", c.volumes.max_size_mb);
    TAKE(s, "max_per_tenant", c.volumes.max_per_tenant);
  }
  if (c.volumes.max_size_mb < 16) return fail(ErrorCode::invalid_argument, "config: volumes.max_size_mb must be >= 16");
  auto pools = f.array("pools");
  if (!pools) return config_error(pools.error());
  for (size_t i = 0; *pools && i < (*pools)->size(); ++i) {
    std::string where = "pools[" + std::to_string(i) + "]";
    const json::value& item = (**pools)[i];
    if (!item.is_object()) return fail(ErrorCode::invalid_argument, "config: " + where + " must be an object");
    JsonFields p(item.as_object(), where);
    ONLY(p, "template", "size", "limits");
    PoolConfig pool{.template_name = "",
                    .size = 0,
                    .cpus = c.defaults.cpus,
                    .memory_mb = c.defaults.memory_mb,
                    .disk_mb = c.defaults.disk_mb,
                    .pids = c.defaults.pids};
    auto name = p.require_string("template");
    if (!name) return config_error(name.error());
    pool.template_name = *name;
    TAKE(p, "size", pool.size);
    auto limits = p.object("limits");
    if (!limits) return config_error(limits.error());
    if (*limits) {
      ONLY(**limits, "cpus", "memory_mb", "disk_mb", "pids");
      TAKE(**limits, "cpus", pool.cpus);
      TAKE(**limits, "memory_mb", pool.memory_mb);
      TAKE(**limits, "disk_mb", pool.disk_mb);
      TAKE(**limits, "pids", pool.pids);
    }
    // A shape no create could ask for would never be claimed.
    if (!(pool.cpus > 0) || pool.cpus > c.maxima.cpus || pool.memory_mb < 16 || pool.memory_mb > c.maxima.memory_mb ||
        pool.disk_mb < 1 || pool.disk_mb > c.maxima.disk_mb || pool.pids < 1 || pool.pids > c.maxima.pids)
      return fail(ErrorCode::invalid_argument, "config: " + where + ".limits must be what a create may ask for (maxima)");
    if (pool.size < 1 || pool.size > 1024)
      return fail(ErrorCode::invalid_argument, "config: " + where + ".size must be 1..1024");
    for (const PoolConfig& other : c.pools)
      if (other.template_name == pool.template_name && other.cpus == pool.cpus && other.memory_mb == pool.memory_mb &&
          other.disk_mb == pool.disk_mb && other.pids == pool.pids)
        return fail(ErrorCode::invalid_argument, "config: " + where + " has the shape of an earlier pool");
    c.pools.push_back(pool);
  }
  auto au = section("audit");
  if (!au) return std::unexpected(au.error());
  if (*au) {
    const JsonFields& s = **au;
    ONLY(s, "enabled", "process_exec", "files_written", "exec_bodies", "retention_days", "file", "syslog");
    for (auto [key, field] : {std::pair{"enabled", &c.audit.enabled}, std::pair{"process_exec", &c.audit.process_exec},
                              std::pair{"files_written", &c.audit.files_written}, std::pair{"syslog", &c.audit.syslog}}) {
      if (auto v = s.boolean(key); !v) return config_error(v.error());
      else if (*v) *field = **v;
    }
    std::string bodies = c.audit.exec_bodies == obs::BodyPolicy::keep ? "keep" : "hash";
    TAKE(s, "exec_bodies", bodies);
    if (bodies != "keep" && bodies != "hash")
      return fail(ErrorCode::invalid_argument, "config: audit.exec_bodies must be \"keep\" or \"hash\"");
    c.audit.exec_bodies = bodies == "keep" ? obs::BodyPolicy::keep : obs::BodyPolicy::hash;
    TAKE(s, "retention_days", c.audit.retention_days);
    TAKE(s, "file", c.audit.file);
    if (c.audit.retention_days < 0) return fail(ErrorCode::invalid_argument, "config: audit.retention_days must be >= 0");
  }
  auto me = section("metrics");
  if (!me) return std::unexpected(me.error());
  if (*me) {
    const JsonFields& s = **me;
    ONLY(s, "public", "sample_interval_s", "history_samples");
    if (auto v = s.boolean("public"); !v) return config_error(v.error());
    else if (*v) c.metrics.public_endpoint = **v;
    TAKE(s, "sample_interval_s", c.metrics.sample_interval_s);
    TAKE(s, "history_samples", c.metrics.history_samples);
    if (c.metrics.sample_interval_s != 0 && c.metrics.sample_interval_s < 1)
      return fail(ErrorCode::invalid_argument, "config: metrics.sample_interval_s must be 0 or >= 1");
    if (c.metrics.history_samples > 10000)
      return fail(ErrorCode::invalid_argument, "config: metrics.history_samples must be <= 10000");
  }
  auto lg = section("logs");
  if (!lg) return std::unexpected(lg.error());
  if (*lg) {
    const JsonFields& s = **lg;
    ONLY(s, "format", "level");
    std::string format = c.json_logs ? "json" : "text";
    TAKE(s, "format", format);
    if (format != "json" && format != "text")
      return fail(ErrorCode::invalid_argument, "config: logs.format must be \"json\" or \"text\"");
    c.json_logs = format == "json";
    TAKE(s, "level", c.log_level);
    if (!obs::parse_level(c.log_level))
      return fail(ErrorCode::invalid_argument, "config: logs.level must be debug, info, warn or error");
  }
  if (auto r = read_egress(section, c.egress); !r) return std::unexpected(r.error());
  auto ports = section("ports");
  if (!ports) return std::unexpected(ports.error());
  if (*ports) {
    const JsonFields& s = **ports;
    ONLY(s, "max_connections", "connect_timeout_s", "idle_timeout_s");
    TAKE(s, "max_connections", c.ports.max_connections);
    TAKE(s, "connect_timeout_s", c.ports.connect_timeout_s);
    TAKE(s, "idle_timeout_s", c.ports.idle_timeout_s);
    for (double t : {c.ports.connect_timeout_s, c.ports.idle_timeout_s})
      if (!(t > 0 && t <= 86400))
        return fail(ErrorCode::invalid_argument, "config: ports timeouts must be in (0, 86400] seconds");
  }
  auto pkg = section("packages");
  if (!pkg) return std::unexpected(pkg.error());
  auto packages = net::parse_packages_config(*pkg ? &**pkg : nullptr, "");
  if (!packages) return std::unexpected(packages.error());
  c.packages = std::move(*packages);
  for (double t : {c.connections.header_timeout_s, c.connections.idle_timeout_s, c.connections.ws_ping_s})
    if (!(t > 0 && t <= 3600))
      return fail(ErrorCode::invalid_argument, "config: connections timeouts must be in (0, 3600] seconds");
  if (c.connections.ws_queue_bytes < 64 * 1024 || c.connections.ws_queue_bytes > (uint64_t{1} << 30))
    return fail(ErrorCode::invalid_argument, "config: connections.ws_queue_bytes must be 64 KiB..1 GiB");
  if (c.budgets.ptys < 1 || c.budgets.ptys > 4096)
    return fail(ErrorCode::invalid_argument, "config: session_budgets.ptys must be 1..4096");
  if (c.block_io.weight > 10000)
    return fail(ErrorCode::invalid_argument, "config: block_io.weight must be 0..10000");
  for (double ratio : {c.admission.memory_overcommit, c.admission.pids_overcommit, c.admission.files_overcommit})
    if (!(ratio > 0) || ratio > 1e6)
      return fail(ErrorCode::invalid_argument, "config: admission.overcommit ratios must be > 0");
  if (!c.admission.ledger_dir.empty() && !c.admission.ledger_dir.starts_with("/"))
    return fail(ErrorCode::invalid_argument, "config: admission.ledger_dir must be an absolute path (or \"\")");
  if (c.exec_nofile < 16) return fail(ErrorCode::invalid_argument, "config: exec_nofile must be >= 16");
  if (c.uid_slots < 1 || c.uid_slots > runtime::kMaxUidSlots)
    return fail(ErrorCode::invalid_argument, "config: uid_slots must be 1.." + std::to_string(runtime::kMaxUidSlots));
  if (c.output_retention_days < 0)
    return fail(ErrorCode::invalid_argument, "config: output_retention.days must be >= 0");
  if (c.max_sessions < 1) return fail(ErrorCode::invalid_argument, "config: max_sessions must be >= 1");
  if (c.http_threads < 1 || c.blocking_threads < 1 || c.launcher_threads < 1 || c.launcher_threads > 64)
    return fail(ErrorCode::invalid_argument, "config: thread counts must be >= 1");
  return c;
}

Result<DaemonConfig> DaemonConfig::load(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  auto object = parse_json_object(*text, "config " + path);
  if (!object) return std::unexpected(object.error());
  return from_json(*object);
}

#undef TAKE
#undef ONLY

}  // namespace cela::session
