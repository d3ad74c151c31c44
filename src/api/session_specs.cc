#include "api/session_specs.h"

#include <signal.h>

#include <cmath>
#include <cstdio>

#include "api/json_body.h"
#include "session/packages.h"
#include "session/file_policy.h"
#include "session/secrets.h"

namespace cela::api {
namespace json = boost::json;

namespace {

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// A whole number in [1, max], defaulting to `fallback` when absent.
Result<uint64_t> whole(const JsonFields& f, std::string_view key, uint64_t fallback, uint64_t max) {
  auto v = f.number(key);
  if (!v) return std::unexpected(v.error());
  if (!*v) return fallback;
  double d = **v;
  if (d < 1 || d != std::floor(d)) return std::unexpected(f.invalid(key, "must be a whole number >= 1"));
  if (d > static_cast<double>(max))
    return std::unexpected(f.invalid(key, "is above this server's maximum of " + std::to_string(max)));
  return static_cast<uint64_t>(d);
}

Result<std::vector<std::string>> env_of(const JsonFields& f) {
  auto map = f.string_map("env");
  if (!map) return std::unexpected(map.error());
  std::vector<std::string> out;
  if (!*map) return out;
  for (auto& [k, v] : **map) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
        v.find('\0') != std::string::npos)
      return std::unexpected(Error{ErrorCode::invalid_argument, 0, "bad environment variable name `" + k + "`"});
    out.push_back(k + "=" + v);
  }
  return out;
}

// `secrets: [{name, as, env, path, ttl_s}]` (API.md "Secrets").
Result<std::vector<session::SecretGrantSpec>> parse_secret_grants(const JsonFields& f, uint64_t max_ttl) {
  std::vector<session::SecretGrantSpec> out;
  auto list = f.array("secrets");
  if (!list) return std::unexpected(list.error());
  if (!*list) return out;
  if ((*list)->size() > 64) return std::unexpected(f.invalid("secrets", "at most 64 grants"));
  for (const auto& v : **list) {
    if (!v.is_object()) return std::unexpected(f.invalid("secrets", "must be an array of objects"));
    JsonFields g(v.get_object(), "secrets[]");
    if (auto ok = g.only({"name", "as", "env", "path", "ttl_s"}); !ok) return std::unexpected(ok.error());
    session::SecretGrantSpec grant;
    auto name = g.require_string("name");
    if (!name) return std::unexpected(name.error());
    if (auto ok = session::check_secret_name(*name); !ok) return std::unexpected(ok.error());
    grant.name = *name;
    auto as = g.string("as");
    if (!as) return std::unexpected(as.error());
    std::string mode = as->value_or("env");
    if (mode != "env" && mode != "file") return std::unexpected(g.invalid("as", "must be \"env\" or \"file\""));
    grant.as_file = mode == "file";
    auto env = g.string("env");
    if (!env) return std::unexpected(env.error());
    auto path = g.string("path");
    if (!path) return std::unexpected(path.error());
    if (grant.as_file) {
      if (*env) return std::unexpected(g.invalid("env", "is for grants with \"as\": \"env\""));
      std::string p = path->value_or(std::string(session::kSecretsDir) + "/" + grant.name);
      std::string prefix = std::string(session::kSecretsDir) + "/";
      std::string file = p.starts_with(prefix) ? p.substr(prefix.size()) : "";
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == ".." ||
          file.find('\0') != std::string::npos || file.size() > 255)
        return std::unexpected(g.invalid("path", "must be a file directly in /run/secrets"));
      grant.path = p;
    } else {
      if (*path) return std::unexpected(g.invalid("path", "is for grants with \"as\": \"file\""));
      grant.env = env->value_or(grant.name);
      if (grant.env.empty() || grant.env.find('=') != std::string::npos ||
          grant.env.find('\0') != std::string::npos)
        return std::unexpected(g.invalid("env", "must be a variable name"));
    }
    auto ttl = g.integer("ttl_s");
    if (!ttl) return std::unexpected(ttl.error());
    if (*ttl) {
      if (**ttl < 1 || static_cast<uint64_t>(**ttl) > max_ttl)
        return std::unexpected(g.invalid("ttl_s", "must be 1.." + std::to_string(max_ttl)));
      grant.ttl_s = static_cast<uint64_t>(**ttl);
    }
    for (const auto& other : out)
      if ((grant.as_file && other.as_file && other.path == grant.path) ||
          (!grant.as_file && !other.as_file && other.env == grant.env))
        return std::unexpected(f.invalid("secrets", "grants twice to the same " +
                                                        std::string(grant.as_file ? "path" : "variable")));
    out.push_back(std::move(grant));
  }
  return out;
}

// Where a volume may be shown: an absolute, normalised path that is not the root nor
// inside the kernel's or init's own mounts.
bool volume_path_ok(const std::string& p) {
  if (p.size() < 2 || p.size() > 255 || p[0] != '/' || p.back() == '/') return false;
  if (p.find('\0') != std::string::npos || p.find("//") != std::string::npos) return false;
  for (size_t at = 0; at != std::string::npos;) {
    size_t next = p.find('/', at + 1);
    std::string part = p.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1);
    if (part == "." || part == "..") return false;
    at = next;
  }
  for (const char* kernel : {"/proc", "/dev", "/sys"})
    if (p == kernel || p.starts_with(std::string(kernel) + "/")) return false;
  return true;
}

constexpr size_t kMaxVolumes = 8;

Result<std::vector<session::VolumeMountSpec>> parse_volume_mounts(const JsonFields& f) {
  std::vector<session::VolumeMountSpec> out;
  auto a = f.array("volumes");
  if (!a) return std::unexpected(a.error());
  if (!*a) return out;
  if ((*a)->size() > kMaxVolumes)
    return std::unexpected(f.invalid("volumes", "holds at most " + std::to_string(kMaxVolumes) + " volumes"));
  for (size_t i = 0; i < (*a)->size(); ++i) {
    const json::value& item = (**a)[i];
    std::string where = "volumes[" + std::to_string(i) + "]";
    if (!item.is_object()) return std::unexpected(Error{ErrorCode::invalid_argument, 0, "field `" + where + "` must be an object"});
    JsonFields v(item.as_object(), where);
    if (auto ok = v.only({"name", "path", "read_only"}); !ok) return std::unexpected(ok.error());
    session::VolumeMountSpec m;
    auto name = v.require_string("name");
    if (!name) return std::unexpected(name.error());
    auto path = v.require_string("path");
    if (!path) return std::unexpected(path.error());
    auto ro = v.boolean("read_only");
    if (!ro) return std::unexpected(ro.error());
    m.name = *name;
    m.path = *path;
    m.read_only = ro->value_or(false);
    if (!volume_path_ok(m.path))
      return std::unexpected(v.invalid("path", "must be an absolute, normalised path other than / and not under "
                                               "/proc, /dev or /sys"));
    for (const auto& other : out) {
      if (other.path == m.path) return std::unexpected(v.invalid("path", "is used twice"));
      if (other.name == m.name) return std::unexpected(v.invalid("name", "is mounted twice"));
    }
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

Result<session::CreateSessionSpec> parse_create_session(const json::object& body,
                                                           const session::DaemonConfig& c) {
  JsonFields f(body);
  if (auto ok = f.only({"template", "limits", "env", "secrets", "network", "packages", "volumes", "metadata", "pool",
                        "allow_sudo", "files", "disk", "auto_pause_s", "auto_resume"});
      !ok)
    return std::unexpected(ok.error());
  session::CreateSessionSpec s;
  auto tmpl = f.string("template");
  if (!tmpl) return std::unexpected(tmpl.error());
  s.template_name = tmpl->value_or(c.default_template);

  json::object empty;
  auto limits_field = f.object("limits");
  if (!limits_field) return std::unexpected(limits_field.error());
  JsonFields l = limits_field->value_or(JsonFields(empty, "limits"));
  if (auto ok = l.only({"cpus", "memory_mb", "disk_mb", "pids", "ttl_s", "idle_timeout_s", "exec_timeout_s"}); !ok)
    return std::unexpected(ok.error());
  auto cpus = l.number("cpus");
  if (!cpus) return std::unexpected(cpus.error());
  s.limits.cpus = cpus->value_or(c.defaults.cpus);
  if (!(s.limits.cpus > 0) || s.limits.cpus > c.maxima.cpus)
    return std::unexpected(l.invalid("cpus", "must be > 0 and at most " + number_text(c.maxima.cpus)));
  struct Whole {
    const char* key;
    uint64_t* out;
    uint64_t fallback, max;
  } wholes[] = {{"memory_mb", &s.limits.memory_mb, c.defaults.memory_mb, c.maxima.memory_mb},
                {"disk_mb", &s.limits.disk_mb, c.defaults.disk_mb, c.maxima.disk_mb},
                {"pids", &s.limits.pids, c.defaults.pids, c.maxima.pids},
                {"ttl_s", &s.limits.ttl_s, c.defaults.ttl_s, c.maxima.ttl_s},
                {"idle_timeout_s", &s.limits.idle_timeout_s, c.defaults.idle_timeout_s, c.maxima.ttl_s},
                {"exec_timeout_s", &s.limits.exec_timeout_s, c.defaults.exec_timeout_s, c.maxima.exec_timeout_s}};
  for (auto& w : wholes) {
    auto v = whole(l, w.key, w.fallback, w.max);
    if (!v) return std::unexpected(v.error());
    *w.out = *v;
  }
  if (s.limits.memory_mb < 16) return std::unexpected(l.invalid("memory_mb", "must be at least 16"));

  auto env = env_of(f);
  if (!env) return std::unexpected(env.error());
  s.env = std::move(*env);
  auto metadata = f.string_map("metadata");
  if (!metadata) return std::unexpected(metadata.error());
  if (*metadata) s.metadata = std::move(**metadata);
  auto sudo = f.boolean("allow_sudo");
  if (!sudo) return std::unexpected(sudo.error());
  s.allow_sudo = *sudo;
  auto pool = f.boolean("pool");
  if (!pool) return std::unexpected(pool.error());
  s.use_pool = pool->value_or(true);
  auto pause_after = f.number("auto_pause_s");
  if (!pause_after) return std::unexpected(pause_after.error());
  if (*pause_after) {
    double v = **pause_after;
    if (v < 0 || v != std::floor(v) || v > static_cast<double>(c.maxima.ttl_s))
      return std::unexpected(f.invalid("auto_pause_s", "must be a whole number of seconds, 0 (never) to " +
                                                           std::to_string(c.maxima.ttl_s)));
    s.auto_pause_s = static_cast<uint64_t>(v);
  }
  auto resume = f.boolean("auto_resume");
  if (!resume) return std::unexpected(resume.error());
  s.auto_resume = resume->value_or(false);

  // Seams for the egress proxy, package gateway, secrets and volumes: until they
  // exist, asking for them is refused by policy rather than silently ignored.
  auto network = f.object("network");
  if (!network) return std::unexpected(network.error());
  if (*network) {
    // Shapes here; the rules themselves are checked by the session layer (net/policy.h).
    const JsonFields& n = **network;
    if (auto ok = n.only({"mode", "allow", "deny"}); !ok) return std::unexpected(ok.error());
    auto mode = n.string("mode");
    if (!mode) return std::unexpected(mode.error());
    s.network.mode = mode->value_or("none");
    if (s.network.mode != "none" && s.network.mode != "allowlist")
      return std::unexpected(n.invalid("mode", "must be \"none\" or \"allowlist\""));
    auto allow = n.string_array("allow");
    if (!allow) return std::unexpected(allow.error());
    auto deny = n.string_array("deny");
    if (!deny) return std::unexpected(deny.error());
    if (*allow) s.network.allow = std::move(**allow);
    if (*deny) s.network.deny = std::move(**deny);
    if (s.network.mode == "none" && (!s.network.allow.empty() || !s.network.deny.empty()))
      return std::unexpected(n.invalid("allow", "needs mode \"allowlist\""));
  }
  auto packages = f.object("packages");
  if (!packages) return std::unexpected(packages.error());
  if (*packages) {
    auto asked = session::parse_package_request(**packages);
    if (!asked) return std::unexpected(asked.error());
    s.packages = std::move(*asked);
  }
  auto grants = parse_secret_grants(f, c.maxima.ttl_s);
  if (!grants) return std::unexpected(grants.error());
  s.secrets = std::move(*grants);
  auto files = f.object("files");
  if (!files) return std::unexpected(files.error());
  if (*files) {
    auto policy = session::parse_file_policy(**files, c.files, /*narrow=*/true);
    if (!policy) return std::unexpected(policy.error());
    s.files = std::move(*policy);
  }
  auto disk = f.object("disk");
  if (!disk) return std::unexpected(disk.error());
  if (*disk) {
    if (auto ok = (*disk)->only({"kind"}); !ok) return std::unexpected(ok.error());
    auto kind = (*disk)->string("kind");
    if (!kind) return std::unexpected(kind.error());
    if (*kind && **kind != "disk" && **kind != "memory")
      return std::unexpected((*disk)->invalid("kind", "must be \"disk\" or \"memory\""));
    s.disk_kind = *kind;
  }
  auto volumes = parse_volume_mounts(f);
  if (!volumes) return std::unexpected(volumes.error());
  s.volumes = std::move(*volumes);
  return s;
}

namespace {
constexpr int64_t kMaxTerminalSide = 1000;

// `cols` and `rows` of a terminal (80x24 when optional and absent).
Result<std::pair<uint16_t, uint16_t>> parse_terminal_size(const JsonFields& f, bool optional) {
  std::pair<uint16_t, uint16_t> size{80, 24};
  for (auto [name, out] : {std::pair{"cols", &size.first}, std::pair{"rows", &size.second}}) {
    auto n = f.integer(name);
    if (!n) return std::unexpected(n.error());
    if (!*n) {
      if (optional) continue;
      return std::unexpected(f.invalid(name, "is required"));
    }
    if (**n < 1 || **n > kMaxTerminalSide)
      return std::unexpected(f.invalid(name, "must be an integer from 1 to " + std::to_string(kMaxTerminalSide)));
    *out = static_cast<uint16_t>(**n);
  }
  return size;
}
}  // namespace

Result<session::ExecSpec> parse_exec(const json::object& body, const session::DaemonConfig& c) {
  JsonFields f(body);
  if (auto ok = f.only({"argv", "cmd", "cwd", "env", "timeout_s", "stdin", "stdin_open", "user", "tty", "cols", "rows"});
      !ok)
    return std::unexpected(ok.error());
  session::ExecSpec s;
  auto argv = f.string_array("argv");
  if (!argv) return std::unexpected(argv.error());
  auto cmd = f.string("cmd");
  if (!cmd) return std::unexpected(cmd.error());
  if (bool(*argv) == bool(*cmd)) return std::unexpected(Error{ErrorCode::invalid_argument, 0, "give exactly one of `argv` and `cmd`"});
  if (*argv) {
    if ((*argv)->empty()) return std::unexpected(f.invalid("argv", "must be a non-empty array of strings"));
    for (auto& a : **argv)
      if (a.find('\0') != std::string::npos) return std::unexpected(f.invalid("argv", "must not contain NUL bytes"));
    s.argv = std::move(**argv);
  } else {
    if ((*cmd)->empty()) return std::unexpected(f.invalid("cmd", "must be a non-empty string"));
    if ((*cmd)->find('\0') != std::string::npos) return std::unexpected(f.invalid("cmd", "must not contain NUL bytes"));
    s.cmd = std::move(**cmd);
  }
  auto user = f.string("user");
  if (!user) return std::unexpected(user.error());
  if (*user) {
    if (**user != "user" && **user != "root") return std::unexpected(f.invalid("user", "must be \"user\" or \"root\""));
    s.user = **user == "root" ? session::ExecUser::root : session::ExecUser::user;
  }
  auto cwd = f.string("cwd");
  if (!cwd) return std::unexpected(cwd.error());
  if (*cwd) {
    if (!(*cwd)->starts_with("/")) return std::unexpected(f.invalid("cwd", "must be an absolute path"));
    if ((*cwd)->find('\0') != std::string::npos) return std::unexpected(f.invalid("cwd", "must not contain NUL bytes"));
    s.cwd = std::move(**cwd);
  }
  auto env = env_of(f);
  if (!env) return std::unexpected(env.error());
  s.env = std::move(*env);
  auto t = f.number("timeout_s");
  if (!t) return std::unexpected(t.error());
  if (*t) {
    if (!(**t > 0) || **t > static_cast<double>(c.maxima.exec_timeout_s))
      return std::unexpected(
          f.invalid("timeout_s", "must be > 0 and at most " + std::to_string(c.maxima.exec_timeout_s)));
    // Fractions of a second are honoured.
    s.timeout_ms = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(**t * 1000)));
  }
  auto in = f.string("stdin");
  if (!in) return std::unexpected(in.error());
  if (*in) s.stdin_text = std::move(**in);
  auto open = f.boolean("stdin_open");
  if (!open) return std::unexpected(open.error());
  s.stdin_open = open->value_or(false);
  auto tty = f.boolean("tty");
  if (!tty) return std::unexpected(tty.error());
  s.tty = tty->value_or(false);
  auto size = parse_terminal_size(f, true);
  if (!size) return std::unexpected(size.error());
  s.cols = size->first;
  s.rows = size->second;
  return s;
}

Result<std::pair<uint16_t, uint16_t>> parse_resize(const json::object& body) {
  JsonFields f(body);
  if (auto ok = f.only({"cols", "rows"}); !ok) return std::unexpected(ok.error());
  return parse_terminal_size(f, false);
}

Result<session::KillSpec> parse_kill(const json::object& body) {
  JsonFields f(body);
  if (auto ok = f.only({"signal", "grace_s"}); !ok) return std::unexpected(ok.error());
  auto name = f.string("signal");
  if (!name) return std::unexpected(name.error());
  auto grace = f.number("grace_s");
  if (!grace) return std::unexpected(grace.error());
  session::KillSpec k;
  if (*name) {
    static const std::pair<const char*, int> kSignals[] = {
        {"SIGTERM", SIGTERM}, {"SIGKILL", SIGKILL}, {"SIGINT", SIGINT},  {"SIGHUP", SIGHUP},
        {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
    k.signal = 0;
    for (auto [n, s] : kSignals)
      if (**name == n) k.signal = s;
    if (!k.signal)
      return std::unexpected(
          f.invalid("signal", "must be one of SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2"));
  }
  double g = grace->value_or(2.0);
  if (!(g >= 0) || g > 300) return std::unexpected(f.invalid("grace_s", "must be 0..300"));
  k.grace = std::chrono::milliseconds(static_cast<int64_t>(g * 1000));
  return k;
}

Result<session::PatchSpec> parse_patch(const json::object& body) {
  JsonFields f(body);
  for (auto& kv : body)
    if (kv.key() != "ttl_s" && kv.key() != "network")
      return std::unexpected(Error{ErrorCode::invalid_argument, 0, "field `" + std::string(kv.key()) + "` cannot be changed"});
  session::PatchSpec p;
  auto network = f.object("network");
  if (!network) return std::unexpected(network.error());
  if (*network) {
    const JsonFields& n = **network;
    if (auto ok = n.only({"allow", "deny"}); !ok) return std::unexpected(ok.error());
    auto allow = n.string_array("allow");
    if (!allow) return std::unexpected(allow.error());
    auto deny = n.string_array("deny");
    if (!deny) return std::unexpected(deny.error());
    p.network_allow = std::move(*allow);
    p.network_deny = std::move(*deny);
  }
  auto ttl = f.number("ttl_s");
  if (!ttl) return std::unexpected(ttl.error());
  if (*ttl) {
    if (**ttl < 1 || **ttl != std::floor(**ttl)) return std::unexpected(f.invalid("ttl_s", "must be a whole number >= 1"));
    p.ttl_s = static_cast<uint64_t>(**ttl);
  }
  return p;
}

}  // namespace cela::api
