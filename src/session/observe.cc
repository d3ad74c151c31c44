// Observability of sessions (session/observe.h): audit records of every lifecycle
// step, exec and program executed inside; limit events; per-session metrics read on
// demand from the cgroups; the sampled history; files written per exec. Reactor-only
// unless said otherwise.
#include "session/observe.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <boost/json.hpp>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "common/fs.h"
#include "common/json_text.h"
#include "common/sha256.h"
#include "common/units.h"
#include "obs/catalog.h"
#include "session/audit_store.h"
#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

std::mutex g_net_mu;
std::unordered_map<std::string, std::pair<uint64_t, uint64_t>> g_net_bytes;  // session -> tx, rx

constexpr uint64_t kCpuThrottleEventMs = 100;  // throttled at least this long in one exec
// A layer counts as full (the exec's writes met ENOSPC) when less than this is left:
// 64 KiB on a tmpfs; on an ext4 layer the filesystem refuses writes while still
// reporting free blocks (its reserved clusters, a few percent), so 1 MiB plus 2%.
uint64_t disk_full_slack(uint64_t total_bytes) {
  return std::max<uint64_t>(64 * 1024, (1 << 20) + total_bytes / 50);
}
constexpr size_t kFilesReported = 100;
constexpr size_t kFilesVisited = 20000;
constexpr uint64_t kFileHashBytes = 64 * 1024;

obs::Subject subject_of(const Session& s, const std::string& exec_id = {}) {
  return {s.record.tenant_id, s.record.id, exec_id};
}

json::object limits_json(const SessionLimits& l) {
  return {{"cpus", l.cpus},          {"memory_mb", l.memory_mb}, {"disk_mb", l.disk_mb},
          {"pids", l.pids},          {"ttl_s", l.ttl_s},         {"idle_timeout_s", l.idle_timeout_s},
          {"exec_timeout_s", l.exec_timeout_s}};
}

json::array argv_json(const std::vector<std::string>& argv, const obs::AuditLog* log) {
  json::array a;
  for (size_t i = 0; i < argv.size(); ++i) a.emplace_back(i == 0 || !log ? argv[i] : log->body(argv[i]));
  return a;
}

// Used and available bytes of the writable layer (tmpfs or ext4: its blocks), and its
// size.
struct LayerSpace {
  uint64_t used = 0, available = 0, total = 0;
};
std::optional<LayerSpace> layer_space(const runtime::Instance& instance) {
  auto fd = instance.open_writable_layer();
  if (!fd) return std::nullopt;
  struct statfs fs {};
  if (::fstatfs(fd->get(), &fs) != 0) return std::nullopt;
  uint64_t bs = static_cast<uint64_t>(fs.f_bsize);
  return LayerSpace{(fs.f_blocks - fs.f_bfree) * bs, fs.f_bavail * bs, fs.f_blocks * bs};
}

// Bytes through the interfaces of init's network namespace (/proc/<pid>/net/dev).
std::optional<std::pair<uint64_t, uint64_t>> netns_bytes(pid_t init_pid) {
  auto text = read_file("/proc/" + std::to_string(init_pid) + "/net/dev");
  if (!text) return std::nullopt;
  std::istringstream in(*text);
  std::string line;
  uint64_t tx = 0, rx = 0;
  int n = 0;
  while (std::getline(in, line)) {
    if (++n <= 2) continue;  // two header lines
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::istringstream f(line.substr(colon + 1));
    uint64_t v[9] = {};
    for (auto& x : v) f >> x;
    rx += v[0];
    tx += v[8];
  }
  return std::pair{tx, rx};
}

// Files written under the writable layer since `since_ms` (regular files by mtime,
// deletions by the whiteout's ctime); sha256 for files up to kFileHashBytes. Runs on
// the observer thread, on its own descriptor of the layer.
void walk_written(int dir, const std::string& prefix, int64_t since_ms, size_t depth, json::array& files,
                  size_t& visited, size_t& changed, bool& truncated) {
  DIR* d = ::fdopendir(dir);
  if (!d) {
    ::close(dir);
    return;
  }
  while (const dirent* entry = ::readdir(d)) {
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (++visited > kFilesVisited) {
      truncated = true;
      break;
    }
    struct stat st {};
    if (::fstatat(::dirfd(d), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    std::string path = prefix + "/" + std::string(name);
    auto ms = [](const timespec& t) { return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000; };
    if (S_ISDIR(st.st_mode)) {
      if (depth >= 64) continue;
      int sub = ::openat(::dirfd(d), entry->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) walk_written(sub, path, since_ms, depth + 1, files, visited, changed, truncated);
      continue;
    }
    bool whiteout = S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0);
    if (whiteout ? ms(st.st_ctim) < since_ms : (!S_ISREG(st.st_mode) || ms(st.st_mtim) < since_ms)) continue;
    ++changed;
    if (files.size() >= kFilesReported) {
      truncated = true;
      continue;
    }
    json::object f{{"path", path}};
    if (whiteout) {
      f["deleted"] = true;
    } else {
      f["size"] = static_cast<uint64_t>(st.st_size);
      f["mode"] = st.st_mode & 07777;
      if (static_cast<uint64_t>(st.st_size) <= kFileHashBytes) {
        int fd = ::openat(::dirfd(d), entry->d_name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (fd >= 0) {
          std::string data(static_cast<size_t>(st.st_size), '\0');
          ssize_t n = ::pread(fd, data.data(), data.size(), 0);
          ::close(fd);
          if (n >= 0) data.resize(static_cast<size_t>(n)), f["sha256"] = sha256_hex(data);
        }
      }
    }
    files.push_back(std::move(f));
  }
  ::closedir(d);
}

}  // namespace

void add_session_net_bytes(const std::string& session_id, uint64_t tx, uint64_t rx) {
  std::lock_guard lock(g_net_mu);
  auto& v = g_net_bytes[session_id];
  v.first += tx;
  v.second += rx;
}

// ---- lifecycle ------------------------------------------------------------------------

void SessionManager::observe_created(const std::shared_ptr<Session>& session) {
  assert_on_reactor();
  Session& s = *session;
  const SessionRecord& r = s.record;
  obs::catalog::sessions_created().add({r.tenant_id, "ok"});
  obs::catalog::session_create_seconds().observe({r.tenant_id}, static_cast<double>(r.startup_ms.value_or(0)) / 1000.0);
  obs::audit("session.create", subject_of(s),
             {{"template", r.template_ref},
              {"limits", limits_json(r.limits)},
              {"startup_ms", r.startup_ms.value_or(0)},
              {"allow_sudo", s.allow_sudo},
              {"slot", r.slot}});
  std::weak_ptr<Session> weak = session;
  s.instance->on_process([this, weak](const runtime::ProcessEvent& ev) {
    if (auto sp = weak.lock()) observe_process(*sp, ev);
  });
  s.instance->on_violation([this, weak](const runtime::ViolationEvent& ev) {
    if (auto sp = weak.lock()) observe_violation(*sp, ev);
  });
  if (config_.metrics.sample_interval_s > 0) {
    s.sampler = std::make_unique<asio::steady_timer>(reactor_);
    arm_sampler(session);
  }
}

void SessionManager::observe_create_failed(const SessionRecord& r, const std::string& reason, const std::string& message) {
  obs::catalog::sessions_created().add({r.tenant_id, "failed"});
  obs::audit("session.create", {r.tenant_id, r.id, ""},
             {{"template", r.template_ref}, {"result", "failed"}, {"reason", reason}, {"message", message}});
}

void SessionManager::observe_change(Session& s, std::string_view kind, json::object data) {
  assert_on_reactor();
  obs::audit(kind, subject_of(s), std::move(data));
}

void SessionManager::observe_terminated(Session& s) {
  assert_on_reactor();
  const SessionRecord& r = s.record;
  s.sampler.reset();
  if (r.termination_reason == "ttl_expired")
    limit_event(s, "ttl", "the session's ttl of " + std::to_string(s.limits.ttl_s) + " s ran out", "");
  obs::catalog::sessions_ended().add({r.tenant_id, r.termination_reason});
  json::object cleanup;
  if (r.cleanup) {
    cleanup = {{"processes_killed", r.cleanup->processes_killed ? json::value(*r.cleanup->processes_killed)
                                                                : json::value(nullptr)},
               {"cgroup_removed", r.cleanup->cgroup_removed},
               {"mounts_removed", r.cleanup->mounts_removed},
               {"upper_dir_freed", r.cleanup->upper_dir_freed},
               {"error", r.cleanup->error}};
  }
  obs::audit("session.terminate", subject_of(s),
             {{"state", r.state},
              {"reason", r.termination_reason},
              {"message", r.termination_message},
              {"cleanup", cleanup},
              {"clean", r.cleanup && r.cleanup->error.empty() && r.cleanup->cgroup_removed},
              {"wall_ms", std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - s.created_at).count()},
              {"processes_executed", s.processes},
              {"seccomp_violations", s.violations},
              {"seccomp_violations_unrecorded", s.violations_unrecorded}});
  std::lock_guard lock(g_net_mu);
  g_net_bytes.erase(r.id);
}

void SessionManager::limit_event(Session& s, const std::string& kind, const std::string& detail,
                                 const std::string& exec_id) {
  LimitEvent ev{store::now_rfc3339(), kind, detail, exec_id};
  s.limit_events.push_back(ev);
  if (s.limit_events.size() > 256) s.limit_events.erase(s.limit_events.begin());
  obs::catalog::limit_events().add({s.record.tenant_id, kind});
  obs::audit("limit." + kind, subject_of(s, exec_id), {{"kind", kind}, {"detail", detail}});
}

// ---- execs ------------------------------------------------------------------------------

void SessionManager::observe_exec_starting(ExecState& e) {
  assert_on_reactor();
  Session& s = e.session;
  if (s.instance)
    if (auto st = s.instance->stats(); st) e.session_at_start = *st;
  e.started_wall_ms = store::now_ms();
}

void SessionManager::observe_exec_started(ExecState& e, const ExecSpec& spec) {
  assert_on_reactor();
  Session& s = e.session;
  obs::AuditLog* log = obs::installed_audit();
  std::string code = spec.cmd.empty() ? "" : spec.cmd;
  for (const auto& a : spec.argv) code += a + '\0';
  // The record's argv and cmd: secret values are already redacted there.
  const ExecRecord& r = e.record;
  json::object d{{"argv", argv_json(r.argv, log)},
                 {"cwd", e.record.cwd},
                 {"user", e.record.user},
                 {"code_sha256", sha256_hex(code + spec.stdin_text)},
                 {"timeout_ms", e.timeout_ms}};
  if (!r.cmd.empty()) d["cmd"] = log ? log->body(r.cmd) : r.cmd;
  if (!spec.stdin_text.empty()) d["stdin"] = obs::body_hash(spec.stdin_text);  // never kept: it may carry secrets
  obs::audit("exec.start", subject_of(s, e.record.id), d);
}

// Before classify_exec: what the session's counters and the writable layer say
// about limits the exec may have hit.
void SessionManager::observe_exec_limits(ExecState& e) {
  assert_on_reactor();
  Session& s = e.session;
  ExecObservation& o = e.observed;
  if (!s.instance) return;
  if (auto now = s.instance->stats(); now && e.session_at_start) {
    const runtime::Stats& before = *e.session_at_start;
    // The session's cgroup holds the limits, so it counts what they refused; the
    // exec's own cgroup may not (v1 pids.events count where the limit is). Another
    // exec running at the same time shares these deltas.
    if (now->pids_max_hits > before.pids_max_hits)
      o.stats.pids_max_hits = std::max(o.stats.pids_max_hits, now->pids_max_hits - before.pids_max_hits);
    if (now->oom_kills > before.oom_kills)
      o.stats.oom_kills = std::max(o.stats.oom_kills, now->oom_kills - before.oom_kills);
    if (now->cpu_throttled_ns > before.cpu_throttled_ns)
      o.stats.cpu_throttled_ns = std::max(o.stats.cpu_throttled_ns, now->cpu_throttled_ns - before.cpu_throttled_ns);
  }
  o.disk_limit_bytes = s.limits.disk_mb << 20;
  if (auto sp = layer_space(*s.instance); sp) o.disk_full = sp->available < disk_full_slack(sp->total);
}

// After classify_exec: the limit events.
void SessionManager::observe_exec_limits_hit(ExecState& e) {
  assert_on_reactor();
  Session& s = e.session;
  const ExecRecord& r = e.record;
  const ExecObservation& o = e.observed;
  if (r.state == "oom_killed" || o.stats.oom_kills > 0) s.oom_kills += std::max<uint64_t>(o.stats.oom_kills, 1);
  if (r.state == "oom_killed" || o.stats.oom_kills > 0)
    limit_event(s, "oom",
                "memory limit " + format_size(s.limits.memory_mb << 20) + " reached (" +
                    std::to_string(std::max<uint64_t>(o.stats.oom_kills, 1)) + " process(es) OOM-killed)",
                r.id);
  if (o.stats.pids_max_hits > 0)
    limit_event(s, "pids",
                "pids limit " + std::to_string(s.limits.pids) + " reached (" + std::to_string(o.stats.pids_max_hits) +
                    " fork(s) refused)",
                r.id);
  if (o.disk_full || (o.wait_status && WIFSIGNALED(*o.wait_status) && WTERMSIG(*o.wait_status) == SIGXFSZ))
    limit_event(s, "disk",
                o.disk_full ? "disk limit " + format_size(o.disk_limit_bytes) + " reached (the writable layer is full)"
                            : "a file reached the disk limit " + format_size(o.disk_limit_bytes) + " (SIGXFSZ)",
                r.id);
  uint64_t throttled_ms = o.stats.cpu_throttled_ns / 1'000'000;
  if (throttled_ms >= kCpuThrottleEventMs)
    limit_event(s, "cpu_throttle",
                "CPU limit of " + json_text(json::value(s.limits.cpus)) + " CPUs throttled the exec for " + std::to_string(throttled_ms) +
                    " ms",
                r.id);
  if (r.state == "timed_out") limit_event(s, "timeout", r.reason, r.id);
}

// After the exec's answer: its audit record, metrics, and the files it wrote.
void SessionManager::observe_exec_ended(ExecState& e) {
  assert_on_reactor();
  Session& s = e.session;
  const ExecRecord& r = e.record;
  obs::catalog::execs().add({r.tenant_id, r.state});
  obs::catalog::exec_seconds().observe({r.tenant_id}, static_cast<double>(r.duration_ms.value_or(0)) / 1000.0);
  json::object d{{"state", r.state},
                 {"exit_code", r.exit_code ? json::value(*r.exit_code) : json::value(nullptr)},
                 {"signal", r.signal ? json::value(*r.signal) : json::value(nullptr)},
                 {"reason", r.reason},
                 {"duration_ms", r.duration_ms.value_or(0)},
                 {"cpu_ms", r.cpu_ms.value_or(0)},
                 {"peak_memory_bytes", r.peak_memory_bytes.value_or(0)},
                 {"stdout_bytes", r.stdout_bytes},
                 {"stderr_bytes", r.stderr_bytes},
                 {"processes_executed", e.processes},
                 {"seccomp_violations", e.violations}};
  obs::audit("exec.end", subject_of(s, r.id), d);

  obs::AuditLog* log = obs::installed_audit();
  if (!log || !log->options().enabled || !log->options().files_written || !s.instance) return;
  auto layer = s.instance->open_writable_layer();
  if (!layer) return;
  // The walk reads the layer off the reactor: a large tree costs the observer thread.
  // tmpfs stamps files with the coarse clock (one tick, up to 10 ms, behind): files
  // written right at the start would otherwise look older than the exec.
  asio::post(observer_, [layer = std::make_shared<UniqueFd>(std::move(*layer)), since = e.started_wall_ms - 20,
                         subject = subject_of(s, r.id)] {
    json::array files;
    size_t visited = 0, changed = 0;
    bool truncated = false;
    int dir = ::fcntl(layer->get(), F_DUPFD_CLOEXEC, 3);
    if (dir < 0) return;
    walk_written(dir, "", since, 0, files, visited, changed, truncated);
    if (changed == 0) return;
    obs::audit("files.written", subject, {{"files", files}, {"count", changed}, {"truncated", truncated}});
  });
}

void SessionManager::observe_process(Session& s, const runtime::ProcessEvent& ev) {
  assert_on_reactor();
  ++s.processes;
  std::string exec_id;
  if (auto* e = dynamic_cast<ExecState*>(ev.exec)) {
    ++e->processes;
    exec_id = e->record.id;
  }
  obs::catalog::processes_executed().add({s.record.tenant_id});
  obs::AuditLog* log = obs::installed_audit();
  if (!log || !log->options().process_exec) return;
  // What the sandbox ran may name a granted secret (`sh -c "echo $VALUE"` expanded):
  // redacted like every other record.
  auto shown = [&](const std::string& text) { return s.redactions ? s.redactions->redact(text) : text; };
  std::vector<std::string> argv;
  for (const auto& a : ev.argv) argv.push_back(shown(a));
  obs::audit("process.exec", subject_of(s, exec_id),
             {{"pid", ev.pid},
              {"ppid", ev.ppid},
              {"uid", ev.uid},
              {"gid", ev.gid},
              {"syscall", ev.syscall},
              {"path", shown(ev.path)},
              {"argv", argv_json(argv, log)},
              {"truncated", ev.truncated}});
}

void SessionManager::observe_violation(Session& s, const runtime::ViolationEvent& ev) {
  assert_on_reactor();
  ++s.violations;
  std::string exec_id;
  if (auto* e = dynamic_cast<ExecState*>(ev.exec)) {
    ++e->violations;
    exec_id = e->record.id;
  }
  obs::catalog::seccomp_violations().add({s.record.tenant_id, ev.syscall});
  if (!s.violation_records.take()) {
    ++s.violations_unrecorded;
    return;
  }
  json::array args;
  for (uint64_t a : ev.args) args.emplace_back(a);
  obs::audit("seccomp.violation", subject_of(s, exec_id),
             {{"syscall", ev.syscall},
              {"args", std::move(args)},
              {"errno", ::strerrorname_np(ev.err)},
              {"pid", ev.pid},
              {"uid", ev.uid},
              {"gid", ev.gid},
              {"unrecorded_before", s.violations_unrecorded}});
  s.violations_unrecorded = 0;
}

// ---- metrics ----------------------------------------------------------------------------

void SessionManager::arm_sampler(const std::shared_ptr<Session>& session) {
  assert_on_reactor();
  if (!session->sampler) return;
  session->sampler->expires_after(std::chrono::milliseconds(static_cast<int64_t>(config_.metrics.sample_interval_s * 1000)));
  std::weak_ptr<Session> weak = session;
  session->sampler->async_wait([this, weak](boost::system::error_code ec) {
    if (ec) return;
    auto s = weak.lock();
    if (!s || s->ended || !s->instance) return;
    MetricSample m;
    m.at_ms = store::now_ms();
    if (auto st = s->instance->stats(); st) {
      m.cpu_ms = st->cpu_usage_ns / 1'000'000;
      m.memory_bytes = st->memory_current_bytes;
      m.pids = st->pids_current;
    }
    m.disk_used_bytes = s->instance->disk_usage().used_bytes;  // the meter metrics() and the record read
    s->history.push_back(m);
    while (s->history.size() > config_.metrics.history_samples) s->history.pop_front();
    arm_sampler(s);
  });
}

void SessionManager::metrics(const Caller& caller, const std::string& id, Done<SessionMetrics> done) {
  on_reactor([this, caller, id, done = std::move(done)] {
    SessionMetrics m;
    m.session_id = id;
    auto it = sessions_.find(id);
    if (it == sessions_.end() || it->second->record.tenant_id != caller.tenant_id) {
      // Ended (or never ours): what was recorded.
      auto rec = store_.get_session(caller.tenant_id, id);
      if (!rec) return done(fail(ErrorCode::not_found, "no session " + id));
      m.live = false;
      m.state = rec->state;
      if (rec->cleanup) {
        m.disk_used_bytes = rec->cleanup->disk_used_bytes;
        m.disk_written_bytes = rec->cleanup->disk_written_bytes;
      }
      if (auto created = store::parse_rfc3339(rec->created_at); created) {
        auto end = rec->termination_at.empty() ? store::now_ms() : store::parse_rfc3339(rec->termination_at).value_or(store::now_ms());
        m.wall_ms = static_cast<uint64_t>(std::max<int64_t>(0, end - *created));
      }
      store::AuditFilter f;
      f.tenant_id = caller.tenant_id;
      f.session_id = id;
      f.kinds = {"limit."};
      if (auto rows = store_.list_audit(f); rows) {
        for (auto& row : *rows) {
          auto rec2 = to_audit_record(std::move(row));
          json::object data = rec2.to_json()["data"].as_object();
          m.limit_events.push_back({rec2.at, rec2.kind.substr(6),
                                    data.contains("detail") ? std::string(data["detail"].as_string()) : "", rec2.exec_id});
        }
      }
      return done(m);
    }
    Session& s = *it->second;
    m.state = s.record.state;
    m.wall_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - s.created_at).count());
    if (s.instance) {
      if (auto st = s.instance->stats(); st) {
        m.cpu_ms = st->cpu_usage_ns / 1'000'000;
        m.cpu_throttled_ms = st->cpu_throttled_ns / 1'000'000;
        m.memory_bytes = st->memory_current_bytes;
        m.memory_peak_bytes = st->memory_peak_bytes;
        m.pids = st->pids_current;
        m.pids_peak = st->pids_peak;
        m.oom_kills = std::max(st->oom_kills, s.oom_kills);
      }
      // The same meter as the session's record (GET …/{id}): use beyond an empty layer,
      // and what reached the image (null on a tmpfs).
      runtime::DiskUsage disk = s.instance->disk_usage();
      m.disk_used_bytes = disk.used_bytes;
      m.disk_written_bytes = disk.written_bytes;
      if (auto net = netns_bytes(s.instance->host_pid())) {
        m.net_tx_bytes = net->first;
        m.net_rx_bytes = net->second;
      }
    }
    {
      std::lock_guard lock(g_net_mu);
      if (auto n = g_net_bytes.find(id); n != g_net_bytes.end()) {
        m.net_tx_bytes = m.net_tx_bytes.value_or(0) + n->second.first;
        m.net_rx_bytes = m.net_rx_bytes.value_or(0) + n->second.second;
      }
    }
    m.processes_executed = s.processes;
    m.seccomp_violations = s.violations;
    m.limit_events = s.limit_events;
    m.history.assign(s.history.begin(), s.history.end());
    done(m);
  });
}

// Deletes audit records past audit.retention_days (the anchor moves with them), hourly
// or more often for a short retention.
void SessionManager::arm_audit_retention() {
  assert_on_reactor();
  double days = config_.audit.retention_days;
  if (days <= 0 || stopping_ || !config_.audit.enabled) return;
  auto retention_ms = static_cast<int64_t>(days * 86'400'000.0);
  if (auto n = store_.purge_audit_before(store::now_ms() - retention_ms); !n)
    std::fprintf(stderr, "cela: audit retention: %s\n", n.error().message().c_str());
  if (!audit_retention_timer_) audit_retention_timer_ = std::make_unique<asio::steady_timer>(reactor_);
  audit_retention_timer_->expires_after(std::chrono::milliseconds(std::clamp<int64_t>(retention_ms / 4, 500, 3'600'000)));
  audit_retention_timer_->async_wait([this](boost::system::error_code ec) {
    if (!ec) arm_audit_retention();
  });
}

// ---- audit reads (any thread: the store only) ---------------------------------------------

Result<AuditPage> SessionManager::audit_records(const Caller& caller, const AuditQuery& q) {
  store::AuditFilter f;
  f.tenant_id = caller.tenant_id;
  f.session_id = q.session_id;
  f.kinds = q.kinds;
  f.since_ms = q.since_ms;
  f.after_seq = q.after_seq;
  f.limit = q.limit + 1;
  auto rows = store_.list_audit(f);
  if (!rows) return std::unexpected(rows.error());
  AuditPage page;
  bool more = static_cast<int64_t>(rows->size()) > q.limit;
  if (more) rows->pop_back();
  for (auto& row : *rows) page.records.push_back(to_audit_record(std::move(row)));
  if (more && !page.records.empty()) page.next_after = page.records.back().seq;
  return page;
}

Result<std::vector<obs::AuditRecord>> SessionManager::session_events(const Caller& caller, const std::string& id,
                                                                     int64_t after_seq, bool& ended) {
  auto rec = get(caller, id);
  if (!rec) return std::unexpected(rec.error());
  ended = rec->state == store::session_state::terminated || rec->state == store::session_state::failed;
  store::AuditFilter f;
  f.tenant_id = caller.tenant_id;
  f.session_id = id;
  f.kinds = session_event_kinds();
  f.after_seq = after_seq;
  f.limit = 10000;
  auto rows = store_.list_audit(f);
  if (!rows) return std::unexpected(rows.error());
  std::vector<obs::AuditRecord> out;
  for (auto& row : *rows) out.push_back(to_audit_record(std::move(row)));
  return out;
}

}  // namespace cela::session
