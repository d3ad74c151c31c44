// The daemon's wiring: configuration, then the start order (state, templates,
// sessions + recovery, HTTP) and the stop order (stop admitting and end sessions,
// then the HTTP threads, then the session threads), written down once here.
#include "daemon/daemon.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>

#include "api/e2b/e2b.h"
#include "api/routes.h"
#include "obs/audit.h"
#include "obs/catalog.h"
#include "obs/log.h"
#include "session/audit_store.h"
#include "api/server.h"
#include "common/encoding.h"
#include "common/fs.h"
#include "common/random.h"
#include "common/nofile.h"
#include "daemon/reload.h"
#include "net/package_gateway.h"
#include "rootfs/template.h"
#include "session/config.h"
#include "session/manager.h"
#include "store/store.h"

namespace cela::daemon {
namespace {

// A daemon secret of 32 random bytes (hex) at `path`, made (0600) on first start.
Result<std::string> load_or_create_secret(const std::string& path) {
  if (auto text = read_file(path)) {
    std::string secret = text->substr(0, text->find('\n'));
    if (secret.size() < 64) return fail(ErrorCode::invalid_argument, path + ": secret too short");
    return secret;
  }
  std::string secret = hex_encode(random_bytes(32));
  if (auto w = store::write_secret_file(path, secret + "\n"); !w) return std::unexpected(w.error());
  return secret;
}

Result<std::pair<std::string, uint16_t>> parse_listen(const std::string& listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0)
    return fail(ErrorCode::invalid_argument, "bad --listen '" + listen + "' (want ADDR:PORT, e.g. 127.0.0.1:8080)");
  unsigned port = 0;
  const char* b = listen.data() + colon + 1;
  auto [p, ec] = std::from_chars(b, listen.data() + listen.size(), port);
  if (ec != std::errc() || p != listen.data() + listen.size() || port > 65535)
    return fail(ErrorCode::invalid_argument, "bad port in --listen '" + listen + "'");
  return std::pair{listen.substr(0, colon), static_cast<uint16_t>(port)};
}

// The config file (or the embedded defaults) with the command line's overrides.
Result<session::DaemonConfig> effective_config(const DaemonOptions& o) {
  session::DaemonConfig config;
  if (!o.config_file.empty()) {
    auto loaded = session::DaemonConfig::load(o.config_file);
    if (!loaded) return std::unexpected(loaded.error());
    config = *loaded;
  }
  if (!o.listen.empty()) config.listen = o.listen == "none" ? "" : o.listen;
  if (!o.socket.empty()) config.socket_path = o.socket;
  if (!o.state_dir.empty()) config.state_dir = o.state_dir;
  if (o.max_sessions > 0) config.max_sessions = o.max_sessions;
  if (o.dev) config.dev_mode = true;
  if (o.config_file.empty()) {  // no file: the machine's own package upstreams still apply
    auto packages = net::parse_packages_config(nullptr, "");
    if (packages) config.packages = std::move(*packages);
  }
  if (config.packages.gateway.cache_dir.empty()) config.packages.gateway.cache_dir = config.state_dir + "/packages";
  if (!config.listen.empty())
    if (auto hp = parse_listen(config.listen); !hp) return std::unexpected(hp.error());
  return config;
}

// A file the config names must be there and readable by the daemon.
Result<void> readable(const std::string& key, const std::string& path) {
  if (path.empty()) return {};
  if (auto text = read_file(path); !text)
    return fail(ErrorCode::invalid_argument, "config: " + key + " " + path + ": " + text.error().message());
  return {};
}

// SIGHUP: the file again; what may change live goes to the sessions, the rest is named.
// `running`: the file's object as the daemon runs it (the applied keys move to it).
void reload(const DaemonOptions& o, boost::json::object& running, session::SessionManager& sessions) {
  if (o.config_file.empty()) {
    obs::warn("SIGHUP: no --config file, nothing to reload");
    return;
  }
  auto object = read_config_object(o.config_file);
  Result<session::DaemonConfig> next = std::unexpected(Error{});
  if (object)
    next = effective_config(o);
  else
    next = std::unexpected(object.error());
  if (!next) {
    obs::error("SIGHUP: reload refused, the running config stays: " + next.error().message());
    std::printf("cela: reload of %s refused (the running config stays): %s\n", o.config_file.c_str(),
                next.error().message().c_str());
    std::fflush(stdout);
    return;
  }
  ReloadPlan plan = plan_reload(running, *object);
  std::promise<void> applied;
  sessions.reconfigure(*next, [&applied](Result<void>) { applied.set_value(); });
  applied.get_future().wait();
  for (const auto& key : plan.applied) {
    if (const auto* v = object->if_contains(key))
      running[key] = *v;
    else
      running.erase(key);
  }
  boost::json::array applied_keys, restart_keys;
  for (const auto& k : plan.applied) applied_keys.emplace_back(k);
  for (const auto& k : plan.restart) restart_keys.emplace_back(k);
  obs::info("config reloaded", {{"file", o.config_file}, {"applied", applied_keys}, {"needs_restart", restart_keys}});
  std::printf("cela: reloaded %s: %s\n", o.config_file.c_str(), describe(plan).c_str());
  std::fflush(stdout);
}

}  // namespace

int check_config(const DaemonOptions& o) {
  auto config = effective_config(o);
  if (!config) {
    std::fprintf(stderr, "cela: %s\n", config.error().message().c_str());
    return 2;
  }
  const session::DaemonConfig& c = *config;
  for (auto [key, path] : {std::pair<const char*, const std::string*>{"egress.ca_file", &c.egress.ca_file},
                           {"packages.ca_file", &c.packages.gateway.ca_file},
                           {"packages.debian_keyring", &c.packages.debian_keyring}})
    if (auto r = readable(key, *path); !r) {
      std::fprintf(stderr, "cela: %s\n", r.error().message().c_str());
      return 2;
    }
  std::printf("cela: config ok: %s\n", o.config_file.empty() ? "(embedded defaults)" : o.config_file.c_str());
  std::printf("  socket %s, listen %s\n", c.socket_path.c_str(), c.listen.empty() ? "none" : c.listen.c_str());
  std::printf("  state %s, templates %s, default template %s\n", c.state_dir.c_str(), c.templates_dir.c_str(),
              c.default_template.c_str());
  std::printf("  max_sessions %lld, pools %zu, audit %s, dev mode %s\n", static_cast<long long>(c.max_sessions),
              c.pools.size(), c.audit.enabled ? "on" : "off", c.dev_mode ? "on" : "off");
  return 0;
}

int run(const DaemonOptions& o) {
  auto say = [](const std::string& line) { obs::error(line); };
  if (::geteuid() != 0) {
    say("cela serve needs root (it creates namespaces, cgroups and id-mapped mounts)");
    return 2;
  }
  auto effective = effective_config(o);
  if (!effective) {
    say(effective.error().message());
    return 2;
  }
  session::DaemonConfig config = std::move(*effective);
  boost::json::object running_file;  // what SIGHUP compares the file with
  if (!o.config_file.empty())
    if (auto object = read_config_object(o.config_file)) running_file = std::move(*object);
  if (auto level = obs::parse_level(config.log_level)) obs::log_level(*level);
  obs::json_logs(config.json_logs);
  obs::catalog::register_all();

  // Descriptors first: the connection caps are derived from what the daemon may hold,
  // keeping reserve_fds for the store and the sessions' pipes and files.
  auto nofile = raise_nofile_limit();
  if (!nofile) {
    say(nofile.error().message());
    return 1;
  }
  const session::ConnectionConfig& cc = config.connections;
  api::ConnectionBudget budget = api::plan_connection_budget(
      nofile->soft, {cc.max_total, cc.root_reserve, cc.per_peer, cc.per_key, cc.reserve_fds,
                     static_cast<uint64_t>(config.max_sessions)});
  for (const auto& warning : budget.warnings) say("config: " + warning);
  if (config.exec_nofile > nofile->hard)
    say("config: exec_nofile " + std::to_string(config.exec_nofile) + " is above the daemon's hard RLIMIT_NOFILE; execs get " +
        std::to_string(nofile->hard));

  api::ServerConfig server_config;
  server_config.slots = budget.limits;
  auto millis = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
  server_config.header_timeout = millis(cc.header_timeout_s);
  server_config.idle_timeout = millis(cc.idle_timeout_s);
  server_config.websocket.ping_interval = millis(cc.ws_ping_s);
  server_config.websocket.max_queued = cc.ws_queue_bytes;
  server_config.unix_socket_path = config.socket_path;
  server_config.io_threads = config.http_threads;
  server_config.blocking_threads = config.blocking_threads;
  server_config.body_limit = config.max_body_bytes;
  server_config.log = [](std::string_view line) { obs::warn(line); };
  // One JSON line per answer, and the HTTP families of GET /metrics (by route pattern,
  // never by raw path: bounded labels).
  server_config.access_log = [](const api::AccessRecord& a) {
    std::string route = a.route.empty() ? "unmatched" : std::string(a.route);
    double seconds = static_cast<double>(a.duration.count()) / 1000.0;
    obs::catalog::http_requests().add({route, std::string(a.method), std::to_string(a.status)});
    obs::catalog::http_seconds().observe({route}, seconds);
    obs::info("access", {{"request_id", a.request_id},
                         {"method", a.method},
                         {"route", route},
                         {"path", a.path},
                         {"status", a.status},
                         {"duration_ms", a.duration.count()},
                         {"tenant", a.tenant_id},
                         {"transport", a.transport == api::Transport::unix_socket ? "unix" : "tcp"}});
  };
  if (config.listen.empty()) {
    server_config.tcp_host.clear();
  } else {
    auto hp = parse_listen(config.listen);
    if (!hp) {
      say(hp.error().message());
      return 2;
    }
    server_config.tcp_host = hp->first;
    server_config.tcp_port = hp->second;
  }

  if (auto r = make_dirs(config.state_dir, 0700); !r) {
    say(r.error().message());
    return 1;
  }
  auto store = store::Store::open(config.state_dir + "/cela.db");
  if (!store) {
    say("state: " + store.error().message());
    return 1;
  }
  store::Quotas quotas{config.quotas.max_sessions, config.quotas.max_memory_mb, config.quotas.max_cpus};
  auto dev_key = (*store)->bootstrap(quotas);
  if (!dev_key) {
    say("bootstrap: " + dev_key.error().message());
    return 1;
  }
  std::string key_path = config.state_dir + "/dev.key";
  if (*dev_key) {
    if (auto w = store::write_secret_file(key_path, **dev_key + "\n"); !w) {
      say("writing the dev key: " + w.error().message());
      return 1;
    }
    std::printf("cela: first start: created tenant `default` and an admin API key in %s (mode 0600)\n",
                key_path.c_str());
  }
  auto tenants = (*store)->list_tenants();
  if (!tenants || tenants->empty()) {
    say("no tenant in the state database");
    return 1;
  }
  // The audit log, before any session exists: every lifecycle step is recorded.
  session::StoreAuditBackend audit_backend(**store);
  std::unique_ptr<obs::AuditLog> audit;
  if (config.audit.enabled) {
    auto opened = obs::AuditLog::open(audit_backend, config.audit);
    if (!opened) {
      say("audit: " + opened.error().message());
      return 1;
    }
    audit = std::move(*opened);
    obs::install_audit(audit.get());
  }
  struct Uninstall {
    ~Uninstall() { obs::install_audit(nullptr); }
  } uninstall_audit;
  std::string default_tenant = tenants->front().id;
  for (auto& t : *tenants)
    if (t.name == "default") default_tenant = t.id;

  // The dev-only host template is generated on first use; make it ready now.
  rootfs::TemplateStore templates;
  templates.root = config.templates_dir;
  if (auto h = rootfs::ensure_host_template(templates); !h) say("host template: " + h.error().message());

  // The package gateway: sessions reach it through their egress door; its records go
  // to the store (a write that fails is logged, the install is not held up).
  store::Store& db = **store;
  auto gateway = net::PackageGateway::open(config.packages.gateway, [&db, say](const net::InstallEvent& e) {
    store::PackageInstallRecord r{.session_id = e.session_id, .tenant_id = e.tenant_id, .at = e.at,
                                  .manager = e.manager, .name = e.name, .version = e.version,
                                  .registry = e.registry, .sha256 = e.sha256, .size = static_cast<int64_t>(e.size),
                                  .verdict = e.verdict, .rule = e.rule, .reason = e.reason,
                                  .cache_hit = e.cache_hit};
    if (auto w = db.insert_package_install(r); !w) say("recording a package install: " + w.error().message());
    obs::catalog::package_installs().add({e.tenant_id, e.manager, e.cache_hit ? std::string("cache_hit") : e.verdict});
    obs::audit("package.install", {e.tenant_id, e.session_id, ""},
               {{"manager", e.manager}, {"name", e.name}, {"version", e.version}, {"registry", e.registry},
                {"sha256", e.sha256}, {"size", e.size}, {"verdict", e.verdict}, {"rule", e.rule},
                {"reason", e.reason}, {"cache_hit", e.cache_hit}});
  });
  if (!gateway) {
    say("packages: " + gateway.error().message());
    return 1;
  }
  auto manager = session::SessionManager::open(config, **store);
  if (!manager) {
    say("sessions: " + manager.error().message());
    return 1;
  }
  (*manager)->set_package_gateway(std::shared_ptr<net::PackageGateway>(std::move(*gateway)));
  auto recover_began = std::chrono::steady_clock::now();
  if (auto n = (*manager)->recover(); !n) {
    say("recover: " + n.error().message());
  } else if (*n > 0) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - recover_began);
    std::printf("cela: closed %lld session(s) left by the previous daemon (reason daemon_restart) in %lld ms\n",
                static_cast<long long>(*n), static_cast<long long>(ms.count()));
    std::fflush(stdout);
  }
  // Warm pools boot in the background (launcher threads) once the leftovers are gone.
  (*manager)->start_pools();

  // Stop signals are taken with sigwait below; block them before threads start.
  sigset_t stop;
  sigemptyset(&stop);
  for (int s : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, s);
  ::pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  obs::metrics().collector("cela_sessions", "Live sessions by tenant and state", {"tenant", "state"},
                           [mgr = manager->get()] {
                             std::vector<obs::Collected> out;
                             for (const auto& [key, n] : mgr->sessions_by_state())
                               out.push_back({{key.first, key.second}, static_cast<double>(n)});
                             return out;
                           });
  struct RemoveCollector {
    ~RemoveCollector() { obs::metrics().remove_collector("cela_sessions"); }
  } remove_collector;
  auto e2b_secret = load_or_create_secret(config.state_dir + "/e2b-token.key");
  if (!e2b_secret) {
    say("e2b tokens: " + e2b_secret.error().message());
    return 1;
  }
  api::e2b::SandboxTokens sandbox_tokens(std::move(*e2b_secret));
  api::HttpServer server(server_config);
  api::RouteContext ctx{server, **manager, default_tenant};
  server.set_authenticator(api::make_authenticator(ctx));
  api::add_api_routes(ctx);
  api::e2b::E2bContext e2b_ctx{ctx, sandbox_tokens};
  api::e2b::add_e2b_routes(e2b_ctx);
  if (auto r = server.start(); !r) {
    say("listen: " + r.error().message());
    return 1;
  }
  std::printf("cela: serving on unix:%s%s\n", config.socket_path.c_str(),
              config.listen.empty() ? "" : (" and http://" + server_config.tcp_host + ":" +
                                            std::to_string(server.tcp_port()))
                                               .c_str());
  std::printf("cela: connections: %zu (%zu reserved for local root), %zu per client, %zu requests per key; "
              "RLIMIT_NOFILE %llu, %llu kept for sessions\n",
              budget.limits.total, budget.limits.root_reserve, budget.limits.per_peer, budget.limits.per_key,
              static_cast<unsigned long long>(budget.fd_limit), static_cast<unsigned long long>(budget.reserve_fds));
  if (config.dev_mode) std::printf("cela: dev mode: dev-only templates (host) are open to local root\n");
  std::fflush(stdout);
  int sig = 0;
  for (;;) {
    ::sigwait(&stop, &sig);
    if (sig != SIGHUP) break;
    reload(o, running_file, **manager);
  }
  // Stop order: stop admitting and end every session (their records say
  // daemon_shutdown), then stop the HTTP threads, then the session threads.
  std::printf("cela: stopping (signal %d): ending live sessions\n", sig);
  std::fflush(stdout);
  (*manager)->shutdown();
  server.stop();
  manager->reset();
  return 0;
}


}  // namespace cela::daemon
