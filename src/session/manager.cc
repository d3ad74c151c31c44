#include "session/manager.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <cmath>
#include <cstdio>
#include <future>

#include "common/fs.h"
#include "common/units.h"
#include "jail/result.h"
#include "jail/sandbox.h"
#include "jail/userns.h"

namespace cela::session {
namespace asio = boost::asio;
namespace json = boost::json;
using Clock = std::chrono::steady_clock;
using store::ExecRecord;
using store::SessionRecord;

namespace {

constexpr auto kExecStartTimeout = std::chrono::seconds(10);
// After an exec's main process exits, how long its output pipes may stay open (held
// by background processes it left) before the exec is finished without them.
constexpr auto kOutputLinger = std::chrono::milliseconds(200);
constexpr uint32_t kUserId = 1000;

std::string exec_state_name(jail::RunState s) { return std::string(jail::to_string(s)); }

}  // namespace

// One exec of a session. Touched under its session's mutex; its Asio objects only on
// the reactor thread.
struct ExecState {
  ExecRecord record;
  uint64_t num = 0;  // id in the init protocol
  std::unique_ptr<jail::Cgroup> cgroup;
  int stdin_fd = -1;  // owned; -1 once closed
  std::unique_ptr<asio::posix::stream_descriptor> out, err;
  std::string out_buf, err_buf;
  uint64_t out_total = 0, err_total = 0;
  bool out_eof = false, err_eof = false;
  bool started = false, start_failed = false, finished = false;
  std::optional<Error> start_error;
  std::optional<int> status;
  bool timed_out = false;
  std::optional<int> kill_signal;  // killed on request
  std::string pending_stdin;       // body.stdin, written once started
  bool close_stdin_after = true;
  std::unique_ptr<asio::steady_timer> timeout, grace, linger;
  uint64_t timeout_ms = 0;
  Clock::time_point started_at;
  std::vector<std::shared_ptr<OutputSubscriber>> subscribers;

  ~ExecState() {
    if (stdin_fd >= 0) ::close(stdin_fd);
  }
};

class Session {
 public:
  std::mutex mu;
  std::condition_variable cv;
  SessionRecord record;
  std::unique_ptr<jail::Sandbox> sandbox;
  std::optional<jail::UidSlot> slot;
  std::unique_ptr<asio::posix::stream_descriptor> control, pidfd;
  std::unique_ptr<asio::steady_timer> timer;
  std::map<std::string, std::shared_ptr<ExecState>> execs;
  std::map<uint64_t, std::shared_ptr<ExecState>> by_num;
  uint64_t next_num = 1;
  bool ended = false;
  std::vector<std::string> env;  // "K=V", session level
  double cpus = 1;
  uint64_t memory_mb = 0, disk_mb = 0, pids = 0, exec_timeout_s = 0, idle_timeout_s = 0;
  Clock::time_point expires, last_activity;
  uint32_t host_base = 0;

  int running_execs() const {
    int n = 0;
    for (auto& [id, e] : execs) n += !e->finished;
    return n;
  }
};

// ---------------------------------------------------------------------------------

SessionManager::SessionManager(const DaemonConfig& config, store::Store& store) : config_(config), store_(store) {
  templates_.root = config.templates_dir;
}

Result<std::unique_ptr<SessionManager>> SessionManager::open(const DaemonConfig& config, store::Store& store) {
  std::unique_ptr<SessionManager> m(new SessionManager(config, store));
  auto mode = jail::detect_cgroup_mode();
  if (!mode) return std::unexpected(mode.error());
  auto host = jail::open_cgroup_host(*mode);
  if (!host) return std::unexpected(host.error());
  m->cgroups_ = std::move(*host);
  // Compiled once; the re-executed inits load it from the same cache.
  auto seccomp = jail::cached_seccomp_program();
  if (!seccomp) return std::unexpected(seccomp.error());
  m->seccomp_ = std::move(*seccomp);
  if (auto r = make_dirs(config.state_dir + "/output", 0700); !r) return std::unexpected(r.error());
  m->work_.emplace(asio::make_work_guard(m->reactor_));
  m->reactor_thread_ = std::thread([mp = m.get()] { mp->reactor_.run(); });
  return m;
}

SessionManager::~SessionManager() {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, s] : sessions_) live.push_back(s);
  }
  for (auto& s : live) terminate(s, "terminated", "daemon_shutdown", "the daemon stopped");
  work_.reset();
  reactor_.stop();
  if (reactor_thread_.joinable()) reactor_thread_.join();
}

int64_t SessionManager::live_sessions() const {
  std::lock_guard lock(mu_);
  return static_cast<int64_t>(sessions_.size());
}

Result<int64_t> SessionManager::recover() {
  auto live = store_.live_sessions();
  if (!live) return std::unexpected(live.error());
  // Only what this state directory's sessions own is touched: another daemon on the
  // same host (tests, staging) keeps its sessions.
  for (const SessionRecord& s : *live) {
    // The processes died with the previous daemon (init's PDEATHSIG); the cgroup
    // (with any per-exec children) remains until removed here.
    json::object cleanup{{"cgroup_removed", true}, {"mounts_removed", true}, {"upper_dir_freed", true}};
    if (auto r = cgroups_->remove_stale(s.id); !r) {
      std::fprintf(stderr, "cela: recover: cgroup of %s: %s\n", s.id.c_str(), r.error().message().c_str());
      cleanup["cgroup_removed"] = false;
    }
    (void)store_.set_terminated(s.id, "terminated", "daemon_restart",
                                "the daemon restarted; the session's processes ended with it", cleanup);
  }
  (void)store_.close_running_execs("the daemon restarted while the exec was running");
  return static_cast<int64_t>(live->size());
}

// ---- create -------------------------------------------------------------------

namespace {

struct CreateSpec {
  std::string template_name;
  double cpus;
  uint64_t memory_mb, disk_mb, pids, ttl_s, idle_timeout_s, exec_timeout_s;
  std::vector<std::string> env;
  std::map<std::string, std::string> metadata;
  json::object limits;
};

Result<double> number_field(const json::object& o, std::string_view key, double fallback, std::string_view where) {
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return fallback;
  if (!v->is_number())
    return fail(ErrorCode::invalid_argument, "field `" + std::string(where) + std::string(key) + "` must be a number");
  return v->to_number<double>();
}

Result<std::map<std::string, std::string>> string_map(const json::object& o, std::string_view key) {
  std::map<std::string, std::string> out;
  const json::value* v = o.if_contains(key);
  if (!v || v->is_null()) return out;
  if (!v->is_object())
    return fail(ErrorCode::invalid_argument, "field `" + std::string(key) + "` must be an object of strings");
  for (auto& kv : v->as_object()) {
    if (!kv.value().is_string())
      return fail(ErrorCode::invalid_argument,
                  "field `" + std::string(key) + "." + std::string(kv.key()) + "` must be a string");
    out[std::string(kv.key())] = std::string(kv.value().as_string());
  }
  return out;
}

Result<std::vector<std::string>> env_list(const json::object& o) {
  auto map = string_map(o, "env");
  if (!map) return std::unexpected(map.error());
  std::vector<std::string> out;
  for (auto& [k, v] : *map) {
    if (k.empty() || k.find('=') != std::string::npos || k.find('\0') != std::string::npos ||
        v.find('\0') != std::string::npos)
      return fail(ErrorCode::invalid_argument, "bad environment variable name `" + k + "`");
    out.push_back(k + "=" + v);
  }
  return out;
}

// Limits within [1, max]; zero, negative or fractional where a whole number is needed
// is an invalid request naming the field.
Result<uint64_t> whole(const json::object& limits, std::string_view key, uint64_t fallback, uint64_t max) {
  auto v = number_field(limits, key, static_cast<double>(fallback), "limits.");
  if (!v) return std::unexpected(v.error());
  if (*v < 1 || *v != static_cast<double>(static_cast<uint64_t>(*v)))
    return fail(ErrorCode::invalid_argument, "field `limits." + std::string(key) + "` must be a whole number >= 1");
  if (*v > static_cast<double>(max))
    return fail(ErrorCode::invalid_argument,
                "field `limits." + std::string(key) + "` is above this server's maximum of " + std::to_string(max));
  return static_cast<uint64_t>(*v);
}

Result<CreateSpec> parse_create(const json::object& body, const DaemonConfig& c) {
  static const char* known[] = {"template", "limits",  "env",      "secrets", "network",
                                "packages", "volumes", "metadata", "pool"};
  for (auto& kv : body) {
    bool ok = false;
    for (const char* k : known) ok = ok || kv.key() == k;
    if (!ok) return fail(ErrorCode::invalid_argument, "unknown field `" + std::string(kv.key()) + "`");
  }
  CreateSpec s;
  s.template_name = c.default_template;
  if (auto* t = body.if_contains("template"); t && !t->is_null()) {
    if (!t->is_string()) return fail(ErrorCode::invalid_argument, "field `template` must be a string");
    s.template_name = std::string(t->as_string());
  }
  json::object limits;
  if (auto* l = body.if_contains("limits"); l && !l->is_null()) {
    if (!l->is_object()) return fail(ErrorCode::invalid_argument, "field `limits` must be an object");
    limits = l->as_object();
    for (auto& kv : limits) {
      static const char* lk[] = {"cpus", "memory_mb", "disk_mb", "pids", "ttl_s", "idle_timeout_s", "exec_timeout_s"};
      bool ok = false;
      for (const char* k : lk) ok = ok || kv.key() == k;
      if (!ok) return fail(ErrorCode::invalid_argument, "unknown field `limits." + std::string(kv.key()) + "`");
    }
  }
  auto cpus = number_field(limits, "cpus", c.defaults.cpus, "limits.");
  if (!cpus) return std::unexpected(cpus.error());
  if (!(*cpus > 0) || *cpus > c.maxima.cpus)
    return fail(ErrorCode::invalid_argument,
                "field `limits.cpus` must be > 0 and at most " + std::to_string(c.maxima.cpus).substr(0, 4));
  s.cpus = *cpus;
#define WHOLE(field, max)                                                    \
  {                                                                          \
    auto v = whole(limits, #field, c.defaults.field, max);                   \
    if (!v) return std::unexpected(v.error());                               \
    s.field = *v;                                                            \
  }
  WHOLE(memory_mb, c.maxima.memory_mb)
  WHOLE(disk_mb, c.maxima.disk_mb)
  WHOLE(pids, c.maxima.pids)
  WHOLE(ttl_s, c.maxima.ttl_s)
  WHOLE(idle_timeout_s, c.maxima.ttl_s)
  WHOLE(exec_timeout_s, c.maxima.exec_timeout_s)
#undef WHOLE
  if (s.memory_mb < 16) return fail(ErrorCode::invalid_argument, "field `limits.memory_mb` must be at least 16");
  s.limits = {{"cpus", s.cpus},         {"memory_mb", s.memory_mb},           {"disk_mb", s.disk_mb},
              {"pids", s.pids},         {"ttl_s", s.ttl_s},                   {"idle_timeout_s", s.idle_timeout_s},
              {"exec_timeout_s", s.exec_timeout_s}};
  auto env = env_list(body);
  if (!env) return std::unexpected(env.error());
  s.env = std::move(*env);
  auto metadata = string_map(body, "metadata");
  if (!metadata) return std::unexpected(metadata.error());
  s.metadata = std::move(*metadata);

  // Seams for the egress proxy, package gateway, secrets and volumes: until they
  // exist, asking for them is refused by policy rather than silently ignored.
  if (auto* n = body.if_contains("network"); n && !n->is_null()) {
    if (!n->is_object()) return fail(ErrorCode::invalid_argument, "field `network` must be an object");
    auto* mode = n->as_object().if_contains("mode");
    if (mode && (!mode->is_string() || mode->as_string() != "none"))
      return fail(ErrorCode::policy_denied, "network mode other than `none` is not available on this server");
  }
  if (auto* p = body.if_contains("packages"); p && !p->is_null()) {
    if (!p->is_object()) return fail(ErrorCode::invalid_argument, "field `packages` must be an object");
    auto* mode = p->as_object().if_contains("mode");
    if (mode && (!mode->is_string() || mode->as_string() != "off"))
      return fail(ErrorCode::policy_denied, "package mode other than `off` is not available on this server");
  }
  for (const char* k : {"secrets", "volumes"}) {
    auto* v = body.if_contains(k);
    if (v && !v->is_null() && !(v->is_array() && v->as_array().empty()))
      return fail(ErrorCode::policy_denied, std::string(k) + " are not available on this server");
  }
  return s;
}

}  // namespace

Result<boost::json::object> SessionManager::create(const Caller& caller, const json::object& body,
                                                   std::chrono::seconds wait) {
  auto began = Clock::now();
  auto spec = parse_create(body, config_);
  if (!spec) return std::unexpected(spec.error());
  auto tenant = store_.get_tenant(caller.tenant_id);
  if (!tenant) return std::unexpected(tenant.error());
  const store::Quotas& q = tenant->quotas;
  if (q.max_cpus > 0 && spec->cpus > q.max_cpus)
    return fail(ErrorCode::quota_exceeded, "tenant quota allows at most " + std::to_string(q.max_cpus).substr(0, 4) +
                                               " cpus per session");
  auto tmpl = rootfs::load_template(templates_, spec->template_name);
  if (!tmpl) {
    if (tmpl.error().code == ErrorCode::not_found)
      return fail(ErrorCode::invalid_argument, "unknown template `" + spec->template_name + "`");
    return std::unexpected(tmpl.error());
  }

  // Capacity (host-wide) and quotas (tenant) -- never a hang, never a silent queue:
  // the optional wait is bounded and ends in the same error.
  {
    std::unique_lock lock(mu_);
    auto deadline = Clock::now() + wait;
    while (reserved_ >= config_.max_sessions) {
      if (wait.count() <= 0 || capacity_cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        if (reserved_ >= config_.max_sessions)
          return fail(ErrorCode::capacity_exceeded,
                      "host is at its limit of " + std::to_string(config_.max_sessions) + " sessions");
      }
    }
    ++reserved_;
  }

  auto session = std::make_shared<Session>();
  SessionRecord& r = session->record;
  r.id = store::new_id("s");
  r.tenant_id = caller.tenant_id;
  r.state = std::string(store::session_state::starting);
  r.template_ref = tmpl->name + "@" + tmpl->version;
  r.limits = spec->limits;
  r.network = {{"mode", "none"}};
  r.metadata = spec->metadata;
  r.spec = body;
  int64_t now = store::now_ms();
  r.created_at = store::format_rfc3339(now);
  r.expires_at = store::format_rfc3339(now + static_cast<int64_t>(spec->ttl_s) * 1000);
  r.last_activity_at = r.created_at;
  r.idle_timeout_s = static_cast<int64_t>(spec->idle_timeout_s);
  r.cgroup = "cela/" + r.id;
  session->env = spec->env;
  session->cpus = spec->cpus;
  session->memory_mb = spec->memory_mb;
  session->disk_mb = spec->disk_mb;
  session->pids = spec->pids;
  session->exec_timeout_s = spec->exec_timeout_s;
  session->idle_timeout_s = spec->idle_timeout_s;
  session->expires = Clock::now() + std::chrono::seconds(spec->ttl_s);
  session->last_activity = Clock::now();

  auto give_back = [&](const Error& e) -> std::unexpected<Error> {
    release_capacity();
    return std::unexpected(e);
  };
  // The tenant's quotas (live sessions, total memory) are checked in the same
  // transaction as the insert: two concurrent creates cannot both slip through.
  // max_cpus is a per-session ceiling (checked above), not a tenant total.
  store::Quotas totals = q;
  totals.max_cpus = 0;
  if (auto ins = store_.insert_session(r, totals); !ins) return give_back(ins.error());

  auto fail_start = [&](const Error& e) -> std::unexpected<Error> {
    (void)store_.set_terminated(r.id, "failed", "start_failed", e.message(), nullptr);
    return give_back(e);
  };
  auto slot = jail::UidSlot::acquire();
  if (!slot) return fail_start(slot.error());
  session->host_base = slot->host_base();
  r.slot = slot->index();
  session->slot.emplace(std::move(*slot));

  jail::SandboxSpec sb;
  sb.name = r.id;
  sb.hostname = "cela-" + r.id.substr(2, 8);
  sb.rootfs.layers = tmpl->layers;
  for (const auto& b : tmpl->binds) sb.rootfs.binds.emplace_back(b.source, b.target);
  sb.rootfs.disk_bytes = spec->disk_mb << 20;
  sb.limits = {spec->memory_mb << 20, spec->cpus, spec->pids};
  sb.host_uid_base = session->host_base;
  sb.reexec_init = true;  // this process is multi-threaded
  auto sandbox = jail::Sandbox::start(sb, *cgroups_, seccomp_);
  if (!sandbox) return fail_start(sandbox.error());
  session->sandbox = std::move(*sandbox);
  r.init_pid = session->sandbox->init_pid();

  r.state = std::string(store::session_state::ready);
  r.ready_at = store::now_rfc3339();
  r.startup_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - began).count();
  if (auto u = store_.update_session(r); !u) {
    session->sandbox->destroy();
    return fail_start(u.error());
  }
  {
    std::lock_guard lock(mu_);
    sessions_[r.id] = session;
  }
  watch(session);
  return store::to_json(r);
}

void SessionManager::release_capacity() {
  {
    std::lock_guard lock(mu_);
    --reserved_;
  }
  capacity_cv_.notify_one();
}

// ---- reactor: control socket, init death, session timers ----------------------

void SessionManager::watch(const std::shared_ptr<Session>& session) {
  asio::post(reactor_, [this, session] {
    std::lock_guard lock(session->mu);
    if (session->ended) return;
    session->control = std::make_unique<asio::posix::stream_descriptor>(
        reactor_, ::fcntl(session->sandbox->control_fd(), F_DUPFD_CLOEXEC, 3));
    session->pidfd = std::make_unique<asio::posix::stream_descriptor>(
        reactor_, ::fcntl(session->sandbox->pidfd(), F_DUPFD_CLOEXEC, 3));
    session->control->async_wait(asio::posix::descriptor_base::wait_read,
                                 [this, session](boost::system::error_code ec) {
                                   if (!ec) on_control(session);
                                 });
    session->pidfd->async_wait(asio::posix::descriptor_base::wait_read,
                               [this, session](boost::system::error_code ec) {
                                 if (ec) return;
                                 terminate(session, "failed", "init_died", "the session's init process died");
                               });
    session->timer = std::make_unique<asio::steady_timer>(reactor_);
    arm_session_timer(session);
  });
}

// TTL or idle timeout, whichever comes first (idle only counts with no exec running).
void SessionManager::arm_session_timer(const std::shared_ptr<Session>& session) {
  if (!session->timer || session->ended) return;
  auto at = session->expires;
  bool idle_first = false;
  if (session->idle_timeout_s > 0 && session->running_execs() == 0) {
    auto idle_at = session->last_activity + std::chrono::seconds(session->idle_timeout_s);
    if (idle_at < at) at = idle_at, idle_first = true;
  }
  session->timer->expires_at(at);
  session->timer->async_wait([this, session, idle_first](boost::system::error_code ec) {
    if (ec) return;
    bool expired, idle;
    {
      std::lock_guard lock(session->mu);
      if (session->ended) return;
      auto now = Clock::now();
      expired = now >= session->expires;
      idle = idle_first && session->running_execs() == 0 &&
             now >= session->last_activity + std::chrono::seconds(session->idle_timeout_s);
      if (!expired && !idle) {
        arm_session_timer(session);
        return;
      }
    }
    if (expired)
      terminate(session, "terminated", "ttl_expired", "the session's ttl of " +
                                                          std::to_string(session->record.limits.at("ttl_s").to_number<int64_t>()) +
                                                          " s ran out");
    else
      terminate(session, "terminated", "idle_timeout",
                "no activity for " + std::to_string(session->idle_timeout_s) + " s");
  });
}

namespace {

void notify_output(ExecState& e, std::string_view stream, uint64_t offset, std::string_view data) {
  std::erase_if(e.subscribers, [](const auto& s) { return s->closed(); });
  for (auto& s : e.subscribers) s->on_output(stream, offset, data);
}

}  // namespace

// Everything that ends an exec funnels here (reactor thread, session locked).
static void finish_exec(store::Store& store, Session& session, ExecState& e, const std::string& output_dir) {
  if (e.finished) return;
  e.finished = true;
  for (auto* t : {e.timeout.get(), e.grace.get(), e.linger.get()})
    if (t) t->cancel();
  e.out.reset();
  e.err.reset();
  if (e.stdin_fd >= 0) ::close(e.stdin_fd), e.stdin_fd = -1;

  ExecRecord& r = e.record;
  jail::RunObservation obs;
  obs.limits = {session.memory_mb << 20, session.cpus, session.pids};
  obs.timeout_ms = e.timeout_ms;
  obs.timed_out = e.timed_out;
  obs.wait_status = e.status;
  if (e.start_error) {
    const Error& err = *e.start_error;
    bool exec_step = err.context == "execve";
    obs.failure = exec_step ? (err.err == ENOENT ? "command not found: " + (r.argv.empty() ? r.cmd : r.argv[0])
                                                 : "cannot execute " + (r.argv.empty() ? r.cmd : r.argv[0]))
                            : "cannot start the command (" + err.context + ")";
    obs.failure_errno = exec_step && err.err == ENOENT ? 0 : err.err;
    obs.failure_exit_code = exec_step ? (err.err == ENOENT ? jail::kExitNotFound : jail::kExitCannotExec)
                                      : jail::kExitFailed;
  }
  if (e.cgroup)
    if (auto st = e.cgroup->stats(); st) obs.stats = *st;
  jail::RunResult result = jail::classify(obs);
  r.state = exec_state_name(result.state);
  if (e.kill_signal && result.state != jail::RunState::oom_killed && result.state != jail::RunState::timed_out &&
      !(result.state == jail::RunState::exited)) {
    r.state = "killed";
    result.reason = "killed on request (" + std::string("SIG") + (::sigabbrev_np(*e.kill_signal) ?: "?") +
                    ", then SIGKILL after the grace period if needed)";
  }
  r.exit_code = result.exit_code ? std::optional<int64_t>(*result.exit_code) : std::nullopt;
  r.signal = result.signal ? std::optional<int64_t>(*result.signal) : std::nullopt;
  r.reason = result.reason;
  // classify() words a timeout for a whole run; here only the exec's tree ended.
  if (result.state == jail::RunState::timed_out)
    r.reason = "wall-clock timeout of " + format_duration(e.timeout_ms) + " reached; every process of the exec was killed";
  r.ended_at = store::now_rfc3339();
  r.duration_ms = e.started ? std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - e.started_at).count()
                            : 0;
  r.cpu_ms = static_cast<int64_t>(result.cpu_ms);
  r.peak_memory_bytes = static_cast<int64_t>(result.peak_memory_bytes);
  r.stdout_bytes = static_cast<int64_t>(e.out_total);
  r.stderr_bytes = static_cast<int64_t>(e.err_total);
  r.partial = (e.out_total + e.err_total) > 0 && r.state != "exited";
  (void)store.finish_exec(r);
  // Persist the captured output for retrieval after the exec (and the daemon) moves on.
  for (auto [stream, buf] : {std::pair{"stdout", &e.out_buf}, std::pair{"stderr", &e.err_buf}}) {
    if (buf->empty()) continue;  // nothing to keep: no file, no index row
    std::string path = output_dir + "/" + r.id + "." + stream;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd >= 0) {
      (void)!::write(fd, buf->data(), buf->size());
      ::close(fd);
    }
    (void)store.set_output({r.id, stream, path, static_cast<int64_t>(buf->size()), r.output_truncated});
  }
  json::object record = store::to_json(r);
  std::erase_if(e.subscribers, [](const auto& s) { return s->closed(); });
  for (auto& s : e.subscribers) s->on_exit(record);
  e.subscribers.clear();
  session.last_activity = Clock::now();
  // The exec's cgroup goes once its last process has; background processes it left
  // keep it (and are ended with the session).
  if (e.cgroup)
    if (auto pop = e.cgroup->populated(); pop && !*pop) (void)e.cgroup->destroy(), e.cgroup.reset();
  session.cv.notify_all();
}

namespace {

void maybe_finish(store::Store& store, Session& s, ExecState& e, const std::string& dir,
                  asio::io_context& reactor) {
  if (e.finished || !e.status) return;
  if (e.out_eof && e.err_eof) {
    finish_exec(store, s, e, dir);
    return;
  }
  if (!e.linger) {
    e.linger = std::make_unique<asio::steady_timer>(reactor, kOutputLinger);
    e.linger->async_wait([&store, &s, &e, dir](boost::system::error_code ec) {
      if (ec) return;
      std::lock_guard lock(s.mu);
      finish_exec(store, s, e, dir);
    });
  }
}

}  // namespace

void SessionManager::on_control(const std::shared_ptr<Session>& session) {
  std::unique_lock lock(session->mu);
  if (session->ended) return;
  auto msg = session->sandbox->next_event();
  if (!msg) {
    lock.unlock();
    terminate(session, "failed", "init_died", "the session's init process closed its control channel");
    return;
  }
  std::string type = msg->type();
  auto* idv = msg->body.if_contains("id");
  uint64_t num = idv ? idv->to_number<uint64_t>() : 0;
  auto it = session->by_num.find(num);
  std::string output_dir = config_.state_dir + "/output";
  if (it != session->by_num.end()) {
    std::shared_ptr<ExecState> e = it->second;
    if (type == "started" && msg->fds.size() == 3) {
      e->started = true;
      e->started_at = Clock::now();
      e->stdin_fd = msg->fds[0].release();
      auto watch_pipe = [this, session, e, output_dir](bool is_out, int fd) {
        auto& desc = is_out ? e->out : e->err;
        desc = std::make_unique<asio::posix::stream_descriptor>(reactor_, fd);
        desc->non_blocking(true);
        auto reader = std::make_shared<std::function<void()>>();
        *reader = [this, session, e, is_out, output_dir, reader] {
          auto& d = is_out ? e->out : e->err;
          if (!d) return;
          d->async_wait(asio::posix::descriptor_base::wait_read, [this, session, e, is_out, output_dir,
                                                                   reader](boost::system::error_code ec) {
            std::lock_guard l(session->mu);
            auto& dd = is_out ? e->out : e->err;
            // Every path that does not re-arm drops the reader's reference to itself.
            if (ec || !dd) {
              *reader = nullptr;
              return;
            }
            char buf[65536];
            ssize_t n = ::read(dd->native_handle(), buf, sizeof buf);
            if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
              (*reader)();
              return;
            }
            if (n <= 0) {
              (is_out ? e->out_eof : e->err_eof) = true;
              dd.reset();
              *reader = nullptr;
              maybe_finish(store_, *session, *e, output_dir, reactor_);
              return;
            }
            std::string& keep = is_out ? e->out_buf : e->err_buf;
            uint64_t& total = is_out ? e->out_total : e->err_total;
            // Past the cap the bytes are counted and dropped (the pipe keeps draining,
            // so the process never blocks on a full pipe).
            size_t room = keep.size() < config_.output_cap_bytes ? config_.output_cap_bytes - keep.size() : 0;
            size_t take = std::min<size_t>(room, static_cast<size_t>(n));
            if (take < static_cast<size_t>(n)) e->record.output_truncated = true;
            total += static_cast<uint64_t>(n);
            if (take > 0) {
              keep.append(buf, take);
              notify_output(*e, is_out ? "stdout" : "stderr", keep.size(), std::string_view(buf, take));
            }
            (*reader)();
          });
        };
        (*reader)();
      };
      watch_pipe(true, msg->fds[1].release());
      watch_pipe(false, msg->fds[2].release());
      if (!e->pending_stdin.empty()) {
        (void)!::write(e->stdin_fd, e->pending_stdin.data(), e->pending_stdin.size());
        e->pending_stdin.clear();
      }
      if (e->close_stdin_after) ::close(e->stdin_fd), e->stdin_fd = -1;
      if (e->timeout_ms > 0) {
        e->timeout = std::make_unique<asio::steady_timer>(reactor_, std::chrono::milliseconds(e->timeout_ms));
        e->timeout->async_wait([session, e](boost::system::error_code ec) {
          if (ec) return;
          std::lock_guard l(session->mu);
          if (e->finished || e->status) return;
          e->timed_out = true;
          if (e->cgroup) (void)e->cgroup->kill_all();
        });
      }
      session->cv.notify_all();
    } else if (type == "exec_error") {
      e->start_failed = true;
      e->start_error = Error{ErrorCode::invalid_argument, msg->body.at("errno").to_number<int>(),
                             std::string(msg->body.at("step").as_string())};
      e->out_eof = e->err_eof = true;
      finish_exec(store_, *session, *e, output_dir);
    } else if (type == "exited") {
      e->status = msg->body.at("status").to_number<int>();
      maybe_finish(store_, *session, *e, output_dir, reactor_);
    }
  }
  if (session->ended || !session->control) return;
  session->control->async_wait(asio::posix::descriptor_base::wait_read,
                               [this, session](boost::system::error_code ec) {
                                 if (!ec) on_control(session);
                               });
}

// ---- terminate -------------------------------------------------------------------

void SessionManager::terminate(const std::shared_ptr<Session>& session, std::string state, std::string reason,
                               std::string message) {
  // Asio objects belong to the reactor: run there, and wait when called elsewhere.
  if (!reactor_.get_executor().running_in_this_thread()) {
    std::promise<void> done;
    auto f = done.get_future();
    asio::post(reactor_, [&] {
      terminate(session, state, reason, message);
      done.set_value();
    });
    f.wait();
    return;
  }
  std::unique_lock lock(session->mu);
  if (session->ended) return;
  session->ended = true;
  json::object cleanup;
  // Execs still running end with the session.
  std::string output_dir = config_.state_dir + "/output";
  for (auto& [id, e] : session->execs) {
    if (e->finished) continue;
    if (!e->status) e->kill_signal = SIGKILL;
    finish_exec(store_, *session, *e, output_dir);
  }
  session->control.reset();
  session->pidfd.reset();
  session->timer.reset();
  uint64_t processes = 0;
  bool cgroup_removed = false;
  std::string cleanup_error;
  if (session->sandbox) {
    if (auto st = session->sandbox->cgroup().stats(); st) processes = st->pids_current;
    for (auto& [id, e] : session->execs) e->cgroup.reset();  // children before the parent
    auto report = session->sandbox->destroy();
    if (report) cgroup_removed = report->cgroup_removed;
    else cleanup_error = report.error().message();
    session->sandbox.reset();
  }
  session->slot.reset();
  cleanup = {{"processes_killed", processes},
             {"cgroup_removed", cgroup_removed},
             {"mounts_removed", true},  // they lived only in the session's mount namespace
             {"upper_dir_freed", true},
             {"secrets_wiped", 0}};
  if (!cleanup_error.empty()) cleanup["error"] = cleanup_error;
  session->record.state = state;
  session->record.termination_reason = reason;
  session->record.termination_message = message;
  session->record.termination_at = store::now_rfc3339();
  session->record.cleanup = cleanup;
  (void)store_.set_terminated(session->record.id, state, reason, message, cleanup);
  lock.unlock();
  {
    std::lock_guard l(mu_);
    sessions_.erase(session->record.id);
  }
  release_capacity();
  session->cv.notify_all();
}

// ---- lookups ---------------------------------------------------------------------

std::shared_ptr<Session> SessionManager::live_session(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

Result<std::shared_ptr<Session>> SessionManager::find_live(const Caller& caller, const std::string& id) {
  if (auto s = live_session(id); s && s->record.tenant_id == caller.tenant_id) return s;
  auto rec = store_.get_session(caller.tenant_id, id);
  if (!rec) return fail(ErrorCode::not_found, "no session " + id);
  return fail(ErrorCode::gone, "session " + id + " has ended: " + rec->termination_reason +
                                   (rec->termination_message.empty() ? "" : " (" + rec->termination_message + ")"));
}

Result<json::object> SessionManager::get(const Caller& caller, const std::string& id) {
  auto rec = store_.get_session(caller.tenant_id, id);
  if (!rec) return fail(ErrorCode::not_found, "no session " + id);
  return store::to_json(*rec);
}

Result<json::object> SessionManager::list(const Caller& caller, const store::SessionFilter& filter,
                                          const store::PageRequest& page) {
  auto p = store_.list_sessions(caller.tenant_id, filter, page);
  if (!p) return std::unexpected(p.error());
  json::array items;
  for (auto& r : p->records) items.push_back(store::to_json(r));
  json::object out{{"sessions", items}};
  out["next_cursor"] = p->next_cursor.empty() ? json::value(nullptr) : json::value(p->next_cursor);
  return out;
}

Result<json::object> SessionManager::patch(const Caller& caller, const std::string& id, const json::object& body) {
  auto session = find_live(caller, id);
  if (!session) return std::unexpected(session.error());
  for (auto& kv : body) {
    if (kv.key() != "ttl_s" && kv.key() != "network")
      return fail(ErrorCode::invalid_argument, "field `" + std::string(kv.key()) + "` cannot be changed");
  }
  if (body.contains("network"))
    return fail(ErrorCode::policy_denied, "network allowlists are not available on this server");
  auto ttl = number_field(body, "ttl_s", 0, "");
  if (!ttl) return std::unexpected(ttl.error());
  if (*ttl < 1 || *ttl > static_cast<double>(config_.maxima.ttl_s))
    return fail(ErrorCode::invalid_argument, "field `ttl_s` must be between 1 and " + std::to_string(config_.maxima.ttl_s));
  auto& s = **session;
  std::promise<json::object> done;
  auto f = done.get_future();
  asio::post(reactor_, [&] {
    std::lock_guard lock(s.mu);
    // ttl_s counts from now: the session lives ttl_s more seconds.
    s.expires = Clock::now() + std::chrono::seconds(static_cast<int64_t>(*ttl));
    s.record.expires_at = store::format_rfc3339(store::now_ms() + static_cast<int64_t>(*ttl) * 1000);
    s.record.limits["ttl_s"] = static_cast<int64_t>(*ttl);
    (void)store_.update_session(s.record);
    if (s.timer) s.timer->cancel();
    s.timer = std::make_unique<asio::steady_timer>(reactor_);
    arm_session_timer(*session);
    done.set_value(store::to_json(s.record));
  });
  return f.get();
}

Result<json::object> SessionManager::remove(const Caller& caller, const std::string& id) {
  auto rec = store_.get_session(caller.tenant_id, id);
  if (!rec) return fail(ErrorCode::not_found, "no session " + id);
  std::shared_ptr<Session> session = live_session(id);
  if (session) terminate(session, "terminated", "deleted", "deleted through the API");
  auto final_rec = store_.get_session(caller.tenant_id, id);
  if (!final_rec) return std::unexpected(final_rec.error());
  json::object out = store::to_json(*final_rec);
  out["cleanup"] = final_rec->cleanup.is_null() ? json::value(json::object{}) : final_rec->cleanup;
  return out;
}

// ---- execs -------------------------------------------------------------------------

namespace {

struct ExecSpec {
  std::vector<std::string> argv;
  std::string cmd;
  std::string cwd;
  std::vector<std::string> env;
  bool root = false;
  uint64_t timeout_ms = 0;  // fractions of a second are honoured
  std::optional<std::string> stdin_text;
  bool stdin_open = false;
};

Result<ExecSpec> parse_exec(const json::object& body, uint64_t default_timeout, uint64_t max_timeout) {
  static const char* known[] = {"argv", "cmd", "cwd", "env", "timeout_s", "stdin", "stdin_open", "user", "tty"};
  for (auto& kv : body) {
    bool ok = false;
    for (const char* k : known) ok = ok || kv.key() == k;
    if (!ok) return fail(ErrorCode::invalid_argument, "unknown field `" + std::string(kv.key()) + "`");
  }
  ExecSpec s;
  auto* argv = body.if_contains("argv");
  auto* cmd = body.if_contains("cmd");
  bool has_argv = argv && !argv->is_null(), has_cmd = cmd && !cmd->is_null();
  if (has_argv == has_cmd) return fail(ErrorCode::invalid_argument, "give exactly one of `argv` and `cmd`");
  if (has_argv) {
    if (!argv->is_array() || argv->as_array().empty())
      return fail(ErrorCode::invalid_argument, "field `argv` must be a non-empty array of strings");
    for (auto& a : argv->as_array()) {
      if (!a.is_string() || a.as_string().find('\0') != json::string::npos)
        return fail(ErrorCode::invalid_argument, "field `argv` must be a non-empty array of strings");
      s.argv.emplace_back(a.as_string());
    }
  } else {
    if (!cmd->is_string() || cmd->as_string().empty())
      return fail(ErrorCode::invalid_argument, "field `cmd` must be a non-empty string");
    s.cmd = std::string(cmd->as_string());
  }
  if (auto* u = body.if_contains("user"); u && !u->is_null()) {
    if (!u->is_string() || (u->as_string() != "user" && u->as_string() != "root"))
      return fail(ErrorCode::invalid_argument, "field `user` must be \"user\" or \"root\"");
    s.root = u->as_string() == "root";
  }
  if (auto* c = body.if_contains("cwd"); c && !c->is_null()) {
    if (!c->is_string() || !c->as_string().starts_with("/"))
      return fail(ErrorCode::invalid_argument, "field `cwd` must be an absolute path");
    s.cwd = std::string(c->as_string());
  }
  auto env = env_list(body);
  if (!env) return std::unexpected(env.error());
  s.env = std::move(*env);
  auto t = number_field(body, "timeout_s", static_cast<double>(default_timeout), "");
  if (!t) return std::unexpected(t.error());
  if (*t <= 0 || *t > static_cast<double>(max_timeout))
    return fail(ErrorCode::invalid_argument, "field `timeout_s` must be > 0 and at most " + std::to_string(max_timeout));
  s.timeout_ms = std::max<uint64_t>(1, static_cast<uint64_t>(std::llround(*t * 1000)));
  if (auto* in = body.if_contains("stdin"); in && !in->is_null()) {
    if (!in->is_string()) return fail(ErrorCode::invalid_argument, "field `stdin` must be a string or null");
    s.stdin_text = std::string(in->as_string());
  }
  if (auto* o = body.if_contains("stdin_open"); o && !o->is_null()) {
    if (!o->is_bool()) return fail(ErrorCode::invalid_argument, "field `stdin_open` must be a boolean");
    s.stdin_open = o->as_bool();
  }
  if (auto* tty = body.if_contains("tty"); tty && !tty->is_null() && !(tty->is_bool() && !tty->as_bool()))
    return fail(ErrorCode::invalid_argument, "`tty` execs are not available yet");
  return s;
}

}  // namespace

Result<json::object> SessionManager::start_exec(const Caller& caller, const std::string& session_id,
                                                const json::object& body) {
  auto found = find_live(caller, session_id);
  if (!found) return std::unexpected(found.error());
  std::shared_ptr<Session> session = *found;
  auto spec = parse_exec(body, session->exec_timeout_s, config_.maxima.exec_timeout_s);
  if (!spec) return std::unexpected(spec.error());

  std::unique_lock lock(session->mu);
  if (session->ended) return fail(ErrorCode::gone, "session " + session_id + " has ended");
  auto e = std::make_shared<ExecState>();
  e->num = session->next_num++;
  ExecRecord& r = e->record;
  r.id = store::new_id("e");
  r.session_id = session_id;
  r.tenant_id = caller.tenant_id;
  r.argv = spec->argv;
  r.cmd = spec->cmd;
  r.user = spec->root ? "root" : "user";
  r.cwd = spec->cwd.empty() ? (spec->root ? "/root" : "/home/user") : spec->cwd;
  r.started_at = store::now_rfc3339();
  e->timeout_ms = spec->timeout_ms;
  e->pending_stdin = spec->stdin_text.value_or("");
  e->close_stdin_after = !spec->stdin_open;

  jail::ExecRequest req;
  req.id = e->num;
  req.argv = spec->argv.empty() ? std::vector<std::string>{"/bin/sh", "-c", spec->cmd} : spec->argv;
  req.uid = req.gid = spec->root ? 0 : kUserId;
  req.cwd = r.cwd;
  req.fsize_bytes = session->disk_mb << 20;
  req.no_new_privs = true;
  std::string home = spec->root ? "/root" : "/home/user";
  req.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home,
             "USER=" + r.user, "LOGNAME=" + r.user, "LANG=C.UTF-8", "TERM=dumb"};
  auto put = [&](const std::string& kv) {
    std::string key = kv.substr(0, kv.find('=') + 1);
    std::erase_if(req.env, [&](const std::string& x) { return x.starts_with(key); });
    req.env.push_back(kv);
  };
  for (auto& kv : session->env) put(kv);
  for (auto& kv : spec->env) put(kv);

  auto cg = session->sandbox->cgroup().create_child("e-" + std::to_string(e->num));
  if (!cg) return std::unexpected(cg.error());
  e->cgroup = std::move(*cg);
  auto join = e->cgroup->open_self_attach(true);
  if (!join) return std::unexpected(join.error());
  std::vector<int> fds;
  for (auto& fd : *join) fds.push_back(fd.get());
  if (auto ins = store_.insert_exec(r); !ins) return std::unexpected(ins.error());
  session->execs[r.id] = e;
  session->by_num[e->num] = e;
  session->last_activity = Clock::now();
  if (auto sent = session->sandbox->send_exec(req, fds); !sent) {
    e->start_error = sent.error();
    e->out_eof = e->err_eof = true;
    finish_exec(store_, *session, *e, config_.state_dir + "/output");
    return std::unexpected(sent.error());
  }
  join->clear();
  // Answer once init has started it (or said why not): 202 means it runs.
  if (!session->cv.wait_for(lock, kExecStartTimeout, [&] { return e->started || e->finished || session->ended; }))
    return fail(ErrorCode::internal, "the session's init did not start the exec in time");
  if (e->finished && !e->started) {
    return json::object{{"id", r.id}, {"state", r.state}};
  }
  return json::object{{"id", r.id}, {"state", "running"}};
}

namespace {

Result<std::shared_ptr<ExecState>> find_exec(Session& s, const std::string& exec_id) {
  auto it = s.execs.find(exec_id);
  if (it == s.execs.end()) return fail(ErrorCode::not_found, "no exec " + exec_id + " in this session");
  return it->second;
}

}  // namespace

Result<json::object> SessionManager::get_exec(const Caller& caller, const std::string& session_id,
                                              const std::string& exec_id) {
  auto rec = store_.get_exec(caller.tenant_id, session_id, exec_id);
  if (!rec) return fail(ErrorCode::not_found, "no exec " + exec_id + " in session " + session_id);
  std::shared_ptr<Session> session = live_session(session_id);
  if (session) {
    std::lock_guard lock(session->mu);
    if (auto e = find_exec(*session, exec_id); e && !(*e)->finished) {
      ExecRecord live = (*e)->record;
      live.stdout_bytes = static_cast<int64_t>((*e)->out_total);
      live.stderr_bytes = static_cast<int64_t>((*e)->err_total);
      return store::to_json(live);
    }
  }
  return store::to_json(*rec);
}

Result<ExecOutput> SessionManager::exec_output(const Caller& caller, const std::string& session_id,
                                               const std::string& exec_id) {
  auto rec = store_.get_exec(caller.tenant_id, session_id, exec_id);
  if (!rec) return fail(ErrorCode::not_found, "no exec " + exec_id + " in session " + session_id);
  std::shared_ptr<Session> session = live_session(session_id);
  if (session) {
    std::lock_guard lock(session->mu);
    if (auto e = find_exec(*session, exec_id); e) {
      if (!(*e)->finished) return fail(ErrorCode::conflict, "exec " + exec_id + " is still running (use ?follow=1)");
      return ExecOutput{(*e)->out_buf, (*e)->err_buf, (*e)->record.output_truncated};
    }
  }
  if (rec->state == "running") return fail(ErrorCode::conflict, "exec " + exec_id + " is still running");
  ExecOutput out;
  out.truncated = rec->output_truncated;
  auto outputs = store_.get_output(exec_id);
  if (!outputs) return std::unexpected(outputs.error());
  for (auto& o : *outputs) {
    auto data = read_file(o.path);
    if (!data) continue;
    (o.stream == "stdout" ? out.stdout_data : out.stderr_data) = std::move(*data);
  }
  return out;
}

Result<void> SessionManager::follow_exec(const Caller& caller, const std::string& session_id,
                                         const std::string& exec_id, uint64_t stdout_from, uint64_t stderr_from,
                                         std::shared_ptr<OutputSubscriber> sub) {
  auto rec = store_.get_exec(caller.tenant_id, session_id, exec_id);
  if (!rec) return fail(ErrorCode::not_found, "no exec " + exec_id + " in session " + session_id);
  std::shared_ptr<Session> session = live_session(session_id);
  // Replay from memory (live or finished in this daemon) or from the stored files.
  auto replay = [&](const std::string& out, const std::string& err) {
    if (stdout_from < out.size())
      sub->on_output("stdout", out.size(), std::string_view(out).substr(stdout_from));
    if (stderr_from < err.size())
      sub->on_output("stderr", err.size(), std::string_view(err).substr(stderr_from));
  };
  if (session) {
    std::lock_guard lock(session->mu);
    auto e = find_exec(*session, exec_id);
    if (e) {
      replay((*e)->out_buf, (*e)->err_buf);
      if ((*e)->finished) {
        sub->on_exit(store::to_json((*e)->record));
      } else {
        (*e)->subscribers.push_back(sub);
      }
      return {};
    }
  }
  auto out = exec_output(caller, session_id, exec_id);
  if (!out) return std::unexpected(out.error());
  replay(out->stdout_data, out->stderr_data);
  auto final_rec = store_.get_exec(caller.tenant_id, session_id, exec_id);
  sub->on_exit(final_rec ? store::to_json(*final_rec) : store::to_json(*rec));
  return {};
}

Result<void> SessionManager::write_stdin(const Caller& caller, const std::string& session_id,
                                         const std::string& exec_id, std::string_view data, bool close) {
  auto found = find_live(caller, session_id);
  if (!found) return std::unexpected(found.error());
  std::lock_guard lock((*found)->mu);
  auto e = find_exec(**found, exec_id);
  if (!e) return std::unexpected(e.error());
  if ((*e)->finished) return fail(ErrorCode::conflict, "exec " + exec_id + " has ended");
  if ((*e)->stdin_fd < 0) return fail(ErrorCode::conflict, "stdin of exec " + exec_id + " is closed");
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write((*e)->stdin_fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EPIPE) return fail(ErrorCode::conflict, "exec " + exec_id + " no longer reads stdin");
      return sys_fail("write stdin");
    }
    done += static_cast<size_t>(n);
  }
  if (close) ::close((*e)->stdin_fd), (*e)->stdin_fd = -1;
  (*found)->last_activity = Clock::now();
  return {};
}

Result<json::object> SessionManager::kill_exec(const Caller& caller, const std::string& session_id,
                                               const std::string& exec_id, int sig, std::chrono::milliseconds grace) {
  auto found = find_live(caller, session_id);
  if (!found) return std::unexpected(found.error());
  std::shared_ptr<Session> session = *found;
  std::promise<Result<json::object>> done;
  auto f = done.get_future();
  asio::post(reactor_, [&] {
    std::lock_guard lock(session->mu);
    auto e = find_exec(*session, exec_id);
    if (!e) return done.set_value(std::unexpected(e.error()));
    auto ex = *e;
    if (ex->finished) return done.set_value(store::to_json(ex->record));
    ex->kill_signal = sig;
    if (ex->cgroup) {
      if (sig == SIGKILL || grace.count() <= 0) {
        (void)ex->cgroup->kill_all();
      } else {
        (void)ex->cgroup->signal_all(sig);
        ex->grace = std::make_unique<asio::steady_timer>(reactor_, grace);
        ex->grace->async_wait([session, ex](boost::system::error_code ec) {
          if (ec) return;
          std::lock_guard l(session->mu);
          if (!ex->finished && ex->cgroup) (void)ex->cgroup->kill_all();
        });
      }
    }
    done.set_value(json::object{{"id", ex->record.id}, {"state", "running"}, {"signal", sig}});
  });
  return f.get();
}

Result<json::object> SessionManager::run(const Caller& caller, const std::string& session_id,
                                         const json::object& body) {
  auto started = start_exec(caller, session_id, body);
  if (!started) return started;
  std::string exec_id(started->at("id").as_string());
  auto found = find_live(caller, session_id);
  if (found) {
    std::unique_lock lock((*found)->mu);
    auto e = find_exec(**found, exec_id);
    if (e) (*found)->cv.wait(lock, [&] { return (*e)->finished || (*found)->ended; });
  }
  auto rec = get_exec(caller, session_id, exec_id);
  if (!rec) return rec;
  auto out = exec_output(caller, session_id, exec_id);
  if (out) {
    (*rec)["stdout"] = out->stdout_data;
    (*rec)["stderr"] = out->stderr_data;
  }
  return rec;
}

Result<std::shared_ptr<SessionFs>> SessionManager::files(const Caller& caller, const std::string& session_id) {
  auto found = find_live(caller, session_id);
  if (!found) return std::unexpected(found.error());
  std::lock_guard lock((*found)->mu);
  Session& s = **found;
  if (s.ended || !s.sandbox) return fail(ErrorCode::gone, "session " + session_id + " has ended");
  std::string root = "/proc/" + std::to_string(s.sandbox->init_pid()) + "/root";
  UniqueFd fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return sys_fail("open " + root);
  s.last_activity = Clock::now();
  FsLimits limits;
  limits.max_file_bytes = config_.max_upload_bytes;
  limits.max_archive_bytes = config_.max_upload_bytes;
  return std::make_shared<SessionFs>(std::move(fd), s.host_base + kUserId, s.host_base + kUserId, limits);
}

}  // namespace cela::session
