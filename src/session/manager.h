// SessionManager: where a request becomes a session, an exec, or a cleanup.
//
// Threads (the rule of this layer):
//   - The reactor thread owns every live session and exec: their state is read and
//     changed only there (assert_on_reactor() guards the reactor-only functions).
//     It watches init's control socket and pidfd, exec output pipes, stdin writes and
//     every timer (exec timeout, kill grace, TTL, idle, capacity waits).
//   - The launcher threads boot sandboxes (runtime::Backend::start blocks for a few
//     ms, mostly waiting for the new init). There are DaemonConfig::launcher_threads
//     of them, started with the manager and joined only at shutdown, after every
//     session has ended: an init's PR_SET_PDEATHSIG follows the thread that cloned
//     it, so no init ever loses its parent while the daemon lives.
//   - Any thread may call the public methods. The asynchronous ones (taking a Done)
//     post to the reactor and return at once; their completion runs on the reactor
//     and must not block. No caller's thread ever waits on sandbox code: a /run, a
//     capacity wait or a stdin write that the process does not read holds no thread.
//   - get(), list() and exec_output() read the store and files on the caller's thread
//     (the API's blocking pool); files() waits only for the reactor, never a sandbox.
//
// Files: manager.cc (wiring, create, lookups, terminate, shutdown), exec.cc (execs:
// start, stdin, kill, follow, run), timers.cc, recovery.cc, admission.{h,cc}
// (capacity and waiters), exec_env.{h,cc}, exec_outcome.{h,cc}, output.{h,cc}
// (capture -> filter -> files -> followers), state.h (the reactor-only records).
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <vector>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "common/error.h"
#include "obs/redact.h"
#include "rootfs/template.h"
#include "rootfs/volumes.h"
#include "runtime/runtime.h"
#include "session/admission.h"
#include "session/config.h"
#include "session/observe.h"
#include "session/egress.h"
#include "session/output.h"
#include "session/template_build.h"
#include "session/templates.h"
#include "session/pool.h"
#include "session/secrets.h"
#include "session/tenants.h"
#include "session/session_fs.h"
#include "session/types.h"
#include "session/upload.h"
#include "session/watch.h"
#include "store/store.h"

namespace cela::net {
class PackageGateway;
}

namespace cela::session {

// Listing sessions (the store's page and filter types).
using store::PageRequest;
using store::SessionFilter;
using store::SessionPage;


struct Session;
struct ExecState;

// A volume as the API shows it: its record and who has it mounted now.
struct VolumeInfo {
  rootfs::VolumeRecord record;
  std::string writer;                // session id, "" = none
  std::vector<std::string> readers;  // session ids
};

class SessionManager {
 public:
  static Result<std::unique_ptr<SessionManager>> open(const DaemonConfig& config, store::Store& store);
  // shutdown() if it was not called.
  ~SessionManager();

  // Closes what a previous daemon left behind; returns how many sessions it closed.
  // Call before serving.
  Result<int64_t> recover();

  // Stops admitting (creates answer 503), ends every live session (`terminated`,
  // reason `daemon_shutdown`; running execs `killed` with that reason) and returns
  // once their records are written. Idempotent.
  void shutdown();

  // ---- sessions
  // Admits (capacity, waiting up to `wait`; tenant quotas), boots the sandbox and
  // completes once init is ready. Dev-only templates (`host`) are refused
  // (permission_denied) unless the daemon is in dev mode and the caller is local root.
  void create(const Caller& caller, CreateSessionSpec spec, std::chrono::seconds wait, Done<store::SessionRecord> done);
  Result<store::SessionRecord> get(const Caller& caller, const std::string& id);
  // Completes with nothing when the session is live (booted, not ended) for the
  // caller; not_found when it does not exist for the caller, gone when it has ended.
  void check_live(const Caller& caller, const std::string& id, Done<void> done);
  Result<store::SessionPage> list(const Caller& caller, const store::SessionFilter& filter,
                                  const store::PageRequest& page);
  void patch(const Caller& caller, const std::string& id, PatchSpec spec, Done<store::SessionRecord> done);
  // Idempotent: a second delete answers the same final record (with its cleanup).
  void remove(const Caller& caller, const std::string& id, Done<store::SessionRecord> done);

  // Back to the template's state, same id: running execs end (`killed`, reason
  // `reset`), the sandbox is destroyed (a new, empty writable layer; volumes stay) and
  // a new one booted. conflict while another reset runs. session/storage.cc.
  void reset(const Caller& caller, const std::string& id, Done<store::SessionRecord> done);

  // ---- volumes (session/storage.cc): persistent, tenant-owned, size-capped
  // Runs mkfs: call from the blocking pool. conflict when the name exists.
  Result<VolumeInfo> create_volume(const Caller& caller, const std::string& name, uint64_t size_mb);
  Result<std::vector<VolumeInfo>> list_volumes(const Caller& caller);
  Result<VolumeInfo> get_volume(const Caller& caller, const std::string& name);
  // conflict while a live session has it mounted.
  void delete_volume(const Caller& caller, const std::string& name, Done<VolumeInfo> done);
  runtime::DiskPoolStats disk_pool_stats() const { return backend_->disk_pool_stats(); }

  // ---- execs
  // Completes once init has started the exec (or said why not): the record.
  void start_exec(const Caller& caller, const std::string& session_id, ExecSpec spec, Done<store::ExecRecord> done);
  void get_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                Done<store::ExecRecord> done);
  // Kept output of an ended exec (conflict while it runs), read from its files.
  Result<ExecOutput> exec_output(const Caller& caller, const std::string& session_id, const std::string& exec_id);
  // Replays output past the given offsets, then streams live until the exec ends
  // (sink->on_exit): no byte lost or repeated across a resume. `done` reports whether
  // the exec exists (before anything is sent to the sink).
  void follow_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                   uint64_t stdout_from, uint64_t stderr_from, std::shared_ptr<OutputSink> sink, Done<void> done);
  // Completes once the bytes are written to the exec's stdin (a process that does not
  // read gets request_timeout after DaemonConfig::stdin_timeout, the rest dropped).
  void write_stdin(const Caller& caller, const std::string& session_id, const std::string& exec_id, std::string data,
                   bool close, Done<void> done);
  // A tty exec's terminal size (SIGWINCH to its foreground process group); conflict
  // for an exec without a tty or one that has ended.
  void resize_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id, uint16_t cols,
                   uint16_t rows, Done<void> done);
  // `signal` to the exec's whole tree, SIGKILL after `grace`.
  void kill_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id, KillSpec spec,
                 Done<store::ExecRecord> done);
  // The session's execs that have not ended, oldest first, each with what it was started
  // with (E2B's process list: its processes are keyed by their pid inside the sandbox).
  void live_execs(const Caller& caller, const std::string& session_id, Done<std::vector<LiveExec>> done);
  // start_exec, then completes when the exec has ended: the record, and the output
  // when it is small (else the caller reads it with exec_output).
  void run(const Caller& caller, const std::string& session_id, ExecSpec spec, Done<RunOutcome> done);

  // ---- processes and ports (session/processes.cc)
  // The session's processes, read from its cgroup tree and /proc: call from the
  // blocking pool (waits for the reactor only, then reads /proc on the caller's thread).
  Result<std::vector<ProcessRecord>> processes(const Caller& caller, const std::string& session_id);
  // `sig` to the process that is `pid` inside the session: permission_denied for init,
  // not_found for a pid that is not the session's. Blocking pool, as processes().
  Result<void> signal_process(const Caller& caller, const std::string& session_id, int64_t pid, int sig);
  // An unconnected socket in the session's network namespace for a proxied connection
  // to `port` (made by its init): rate_limited past ports.max_connections open at once,
  // conflict while paused (unless auto_resume: it resumes first), permission_denied
  // for the egress door's port.
  void open_port(const Caller& caller, const std::string& session_id, uint16_t port, Done<PortSocket> done);

  // ---- pause (session/pause.cc)
  // Freezes every process of the session (state `paused`: no CPU; memory, files and
  // processes kept) or thaws it (state `ready`). Idempotent; completes once the kernel
  // reports the new state (the wait is a reactor timer, never a thread). While paused,
  // the TTL runs on, the idle clock and exec timeouts stop; an exec, stdin, kill or
  // file call resumes the session first when it was created with auto_resume, else it
  // answers conflict.
  void pause(const Caller& caller, const std::string& id, Done<store::SessionRecord> done);
  void resume(const Caller& caller, const std::string& id, Done<store::SessionRecord> done);

  // A path-safe view of the session's filesystem (files API), acting as the sandbox user
  // `as` (its ids own what is created; its permissions apply unless it is root inside;
  // SessionFs::home() is its home).
  Result<std::shared_ptr<SessionFs>> files(const Caller& caller, const std::string& session_id,
                                           ExecUser as = ExecUser::user);
  // A streamed upload of `path` (session/upload.h): the temp file is created and the
  // writer started in the session's cgroups. declared_bytes (Content-Length): limit when
  // it is over max_upload_bytes or what the session has free (disk, memory headroom), so
  // the body need not be read. Waits for the reactor only.
  Result<std::unique_ptr<Upload>> open_upload(const Caller& caller, const std::string& session_id,
                                              const std::string& path, const WriteOptions& options,
                                              std::optional<uint64_t> declared_bytes, ExecUser as = ExecUser::user);
  // A watch of directory `path` (session/watch.h): its helper started in the session as
  // the user `as`, after the path was checked as files() checks it (not_found,
  // invalid_argument for a non-directory). Waits for the reactor only.
  Result<std::shared_ptr<DirWatch>> open_watch(const Caller& caller, const std::string& session_id,
                                               const std::string& path, bool recursive, ExecUser as);
  static constexpr size_t kMaxWatchedDirs = 4096;  // per recursive watch

  // A streamed archive import into the existing directory `path` (session/upload.h):
  // the directory is checked and the size refused as for open_upload, then the helper
  // is started in the session. Waits for the reactor only.
  Result<std::unique_ptr<ArchiveImport>> open_import(const Caller& caller, const std::string& session_id,
                                                     const std::string& path, std::optional<uint64_t> declared_bytes);

  // ---- warm pools (session/pool.cc)
  // Boots the configured pools' sessions in the background (call after recover()).
  void start_pools();
  // What GET /v1/pools shows: one status per configured pool, in config order.
  void pool_status(Done<std::vector<PoolStatus>> done);

  // ---- observability (session/observe.cc)
  // The session's metrics now: live ones read from its cgroups, an ended one's limit
  // events from the audit.
  void metrics(const Caller& caller, const std::string& id, Done<SessionMetrics> done);
  // The caller's tenant's audit records (store reads, any thread).
  Result<AuditPage> audit_records(const Caller& caller, const AuditQuery& query);
  // A session's lifecycle and limit events after `after_seq`; `ended` tells whether the
  // session's record is final (no more will come). Any thread.
  Result<std::vector<obs::AuditRecord>> session_events(const Caller& caller, const std::string& id,
                                                       int64_t after_seq, bool& ended);
  // Live sessions by state and tenant (the /metrics collector). Any thread.
  std::vector<std::pair<std::pair<std::string, std::string>, int64_t>> sessions_by_state() const;
  // An export (download or archive) of a live session leaves a record: path, size,
  // sha256 (the audit; session/audit_hook.h).
  void record_export(const Caller& caller, const std::string& session_id, std::string_view kind,
                     std::string_view path, uint64_t size, std::string_view sha256);

  // ---- packages
  // The gateway sessions' package managers talk to (daemon-owned, outlives the
  // manager); set before serving. Without one, `packages` in a create is refused.
  // It is registered with the egress proxy as the internal service of its host.
  void set_package_gateway(std::shared_ptr<net::PackageGateway> gateway);
  // The session's install records (also after it ended), oldest first.
  Result<store::PackageInstallPage> package_installs(const Caller& caller, const std::string& session_id,
                                                     const store::PageRequest& page);

  // ---- templates (templates_api.cc, snapshot.cc)
  // The stores as the caller's tenant sees them (shared + its own).
  TemplateCatalog catalog() const { return TemplateCatalog(templates_); }
  // Removes one version of a private template (any thread; waits for the reactor
  // only): conflict while a session that is live or booting runs on it,
  // permission_denied for a shared template. Unreferenced layers are collected.
  Result<void> remove_template_version(const Caller& caller, const std::string& name, const std::string& version);
  // Freezes the session, copies its writable layer into a new private version of
  // template `name` (stacked on the session's template), thaws. Processes are not
  // kept. The copy runs on the storage thread, never the reactor.
  void snapshot(const Caller& caller, const std::string& session_id, std::string name, Done<rootfs::Template> done);

  // Template builds (their own thread; session/template_build.h).
  TemplateBuilds& builds() { return *builds_; }

  int64_t live_sessions() const { return live_count_.load(); }
  // True when no create could be admitted now (readyz).
  bool full() const;
  // The config as it stands (any thread): a snapshot that a reload (reconfigure) may
  // replace at any time, so take it once per request and read from that.
  std::shared_ptr<const DaemonConfig> config() const { return published_.load(); }
  // SIGHUP (daemon/reload.h): takes what may change live from `next` (defaults, maxima,
  // tenant quota defaults, stdin timeout, output retention, logs) on the reactor, then
  // publishes the result; `done` on the reactor. The rest of `next` is not looked at.
  void reconfigure(const DaemonConfig& next, Done<void> done);
  // Tenants and keys (any thread).
  Tenants& tenants() { return tenants_; }
  // The egress proxy every door goes to (net/egress_proxy.h): register internal
  // services here before serving.
  net::EgressProxy& egress() { return *egress_; }
  // A tenant's network ceiling (admin-set; nullopt = none). Setting one checks its rules
  // (invalid_argument) and applies to the tenant's live doors for new connections at
  // once; sessions' own rules beyond it then simply stop matching. Any thread.
  Result<std::optional<store::NetworkCeiling>> network_ceiling(const std::string& tenant_id);
  Result<void> set_network_ceiling(const std::string& tenant_id, const std::optional<store::NetworkCeiling>& ceiling);
  // GET /v1/sessions/{id}/egress: the session's attempts, oldest first (any thread).
  Result<std::pair<std::vector<store::EgressRecord>, std::string>> egress_records(const Caller& caller,
                                                                                  const std::string& session_id,
                                                                                  const store::PageRequest& page);
  // Tenant secrets, sealed at rest (any thread).
  Secrets& secrets() { return secrets_; }

 private:
  friend struct ExecState;
  SessionManager(const DaemonConfig& config, store::Store& store);

  void assert_on_reactor() const;
  template <class F>
  void on_reactor(F&& f) {
    boost::asio::post(reactor_, std::forward<F>(f));
  }

  // create() steps
  // Dev-only templates: dev mode and local root, else permission_denied (403).
  Result<void> dev_template_allowed(const Caller& caller, const std::string& name) const;
  void admitted(const Caller& caller, CreateSessionSpec spec, std::chrono::steady_clock::time_point began,
                Done<store::SessionRecord> done);
  void booted(std::shared_ptr<Session> session, Result<std::unique_ptr<runtime::Instance>> instance,
              Done<store::SessionRecord> done);
  // The template's start command (session/start_command.cc): started as an exec of
  // the booted session, then (ready_port) waited for until something accepts on that
  // port inside. `done` on the reactor; an error when it could not start, ended, or
  // did not listen in time.
  void run_start_command(std::shared_ptr<Session> session, Done<void> done);
  void wait_start_ready(std::shared_ptr<Session> session, std::string exec_id,
                        std::chrono::steady_clock::time_point deadline,
                        Done<void> done);
  runtime::InstanceSpec instance_spec(const std::string& id, const rootfs::Template& tmpl,
                                      const SessionLimits& limits) const;
  // Launcher thread: boots the sandbox and writes the package manager settings into it
  // before anything runs (create and reset). Reads only what create fixed.
  Result<std::unique_ptr<runtime::Instance>> start_instance(const Session& session, const runtime::InstanceSpec& is);

  // pool.cc. claim_pooled: true when it answered `done` (a claim, or a refusal of the
  // caller's quota); false when no pool of the spec's shape has a ready session (the
  // create boots cold). fill_pools boots what the pools lack; drain_pools ends them all.
  bool claim_pooled(const Caller& caller, const CreateSessionSpec& spec, std::chrono::steady_clock::time_point began,
                    Done<store::SessionRecord>& done);
  void fill_pools();
  void boot_pooled(WarmPool& pool);
  void pooled_booted(WarmPool& pool, std::shared_ptr<Session> session,
                     Result<std::unique_ptr<runtime::Instance>> instance, std::chrono::steady_clock::time_point began);
  // `session` by value: callers pass pool.ready.front(), which the erase inside destroys.
  void drop_pooled(WarmPool& pool, std::shared_ptr<Session> session, const std::string& why);
  void retry_pool_later(WarmPool& pool, const Error& why);
  void drain_pools();

  // Secret grants (grants.cc): opened at create (not_found for an unknown name),
  // written once the sandbox is up, ended at their TTL and at teardown (file wiped,
  // value wiped; true when it was live).
  Result<void> resolve_grants(const Caller& caller, Session& s, const std::vector<SecretGrantSpec>& grants);
  Result<void> install_grants(const std::shared_ptr<Session>& session);
  // The files of the session's live file grants, into its sandbox (create and reset).
  Result<void> write_grant_files(Session& s);
  bool end_grant(Session& s, size_t index, std::string_view why);
  uint64_t end_grants(Session& s, std::string_view why);

  // Reactor-only lookups and transitions.
  Result<std::shared_ptr<Session>> find_live(const Caller& caller, const std::string& id);
  Result<std::shared_ptr<ExecState>> find_exec(const Caller& caller, const std::string& session_id,
                                               const std::string& exec_id);
  // Why an exec find_exec did not find cannot take input: it ended and was forgotten
  // (its record is the store's: conflict), or there is no such exec (`why`).
  Error not_live_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id, Error why);
  void terminate(const std::shared_ptr<Session>& session, std::string state, std::string reason,
                 std::string message);
  void arm_session_timer(const std::shared_ptr<Session>& session);
  // timers.cc: the TTL of a pause_at_ttl session ran out: paused, and kept maxima.ttl_s more.
  void park(const std::shared_ptr<Session>& session);
  // Storage (session/storage.cc): volumes of a create, checked and claimed for the
  // session (reactor); given back when it ends; the live disk meters get() reads.
  Result<void> claim_volumes(Session& session, const std::vector<VolumeMountSpec>& volumes);
  void release_volumes(Session& session);
  void set_meter(const std::string& id, std::shared_ptr<runtime::DiskMeter> meter, uint64_t resets);
  void drop_meter(const std::string& id);
  void fill_disk(store::SessionRecord& record) const;
  void rebooted(std::shared_ptr<Session> session, Result<std::unique_ptr<runtime::Instance>> instance,
                std::chrono::steady_clock::time_point began, Done<store::SessionRecord> done);
  VolumeInfo volume_info(rootfs::VolumeRecord record) const;
  // Runs a disk layer's release on a launcher thread; with `record`, the session's
  // cleanup report then says whether its loop device let go (set_cleanup), and what
  // waits in after_release runs.
  void release_disk_later(std::shared_ptr<Session> session, std::function<bool()> release, bool record);
  void pause_or_resume(const Caller& caller, const std::string& id, bool frozen, Done<store::SessionRecord> done);
  // pause.cc: freezes or thaws; `done` once the kernel reports it (or why not).
  void set_frozen(const std::shared_ptr<Session>& session, bool frozen, Done<void> done);
  // True when the session runs now. Else false, and `retry` runs on the reactor once it
  // does (after the resume auto_resume starts, or after a change in flight), or gets
  // the error (conflict: paused without auto_resume; the resume failed).
  bool running_or_later(Session& session, std::function<void(Result<void>)> retry);
  void arm_exec_start_timer(const std::shared_ptr<Session>& session, const std::shared_ptr<ExecState>& e,
                            std::chrono::steady_clock::duration after);
  void arm_exec_timeout(ExecState& e, std::chrono::steady_clock::duration after);
  void exec_started(ExecState& e);
  void exec_finished(ExecState& e);
  // After this turn: drops an ended exec from its session's live execs (exec_finished).
  void forget_exec_later(const ExecState& e);
  void maybe_finish(ExecState& e);
  void retry_unrecorded();
  void arm_retention();

  // session/observe.cc
  void observe_created(const std::shared_ptr<Session>& session);
  void observe_create_failed(const store::SessionRecord& record, const std::string& reason, const std::string& message);
  void observe_terminated(Session& session);
  // A change of a live session that is neither create nor end (session.pause,
  // session.resume, session.reset, session.snapshot): one audit record.
  void observe_change(Session& session, std::string_view kind, boost::json::object data);
  // Before the exec is sent: the session's counters its limit events are deltas of.
  void observe_exec_starting(ExecState& e);
  // Once it was sent (started or not): its exec.start record.
  void observe_exec_started(ExecState& e, const ExecSpec& spec);
  void observe_exec_limits(ExecState& e);
  // The limit events of an ended exec (before its answer); then, after the answer,
  // its exec.end record, metrics and files written.
  void observe_exec_limits_hit(ExecState& e);
  void observe_exec_ended(ExecState& e);
  void observe_process(Session& session, const runtime::ProcessEvent& event);
  void observe_violation(Session& session, const runtime::ViolationEvent& event);
  void limit_event(Session& session, const std::string& kind, const std::string& detail, const std::string& exec_id);
  void arm_sampler(const std::shared_ptr<Session>& session);
  void arm_audit_retention();
  std::unique_ptr<boost::asio::steady_timer> audit_retention_timer_;

  // What the files API needs of a live session, taken on the reactor.
  struct FsView {
    UniqueFd root;
    uint32_t uid = 0, gid = 0;                // host ids of the sandbox's user
    uint32_t inside_uid = 0, inside_gid = 0;  // the same, as the sandbox sees them
    uint32_t id_base = 0;                     // host id of the sandbox's root
    std::string account, home;                // the user's name and home
    uint64_t memory_limit = 0, memory_current = 0;     // uploads of kMemoryCheckBytes or more
    std::shared_ptr<runtime::WriterLauncher> writers;  // uploads only
    FilePolicy files;                                  // the session's file policy
    std::shared_ptr<const obs::Redactions> redactions;  // its granted secrets
  };
  // for_upload: also the writers, and the memory usage when `declared` is large enough
  // for it to matter (reading the cgroup's statistics costs more than a small upload).
  Result<FsView> fs_view(const Caller& caller, const std::string& session_id, bool for_upload,
                         std::optional<uint64_t> declared = std::nullopt, ExecUser as = ExecUser::user);
  static constexpr uint64_t kMemoryCheckBytes = 1 << 20;
  FsLimits fs_limits() const;

  // The process table of a live session and how to show its users (processes.cc).
  struct ProcessView {
    std::unique_ptr<runtime::ProcessTable> table;
    rootfs::TemplateUser user;
    std::shared_ptr<const obs::Redactions> redactions;
  };
  Result<ProcessView> process_view(const Caller& caller, const std::string& session_id);

  // Egress (session/egress_session.cc): the proxy, at open; a create's door and
  // policy; handing the booted sandbox's door to the proxy; PATCH network.
  Result<void> open_egress();
  Result<void> egress_for(const Caller& caller, const CreateSessionSpec& spec, Session& session);
  Result<void> open_session_door(Session& session);
  Result<void> patch_network(Session& session, const PatchSpec& spec);
  // The session's file policy applied to a view: writable roots, the sandbox user's
  // permissions, exportable roots and the secret scan of exports (file_access.cc).
  void apply_file_policy(SessionFs& fs, const FsView& view) const;
  // limit when `declared` cannot fit the session (free disk, memory headroom); callers
  // check max_upload_bytes first, before taking the view.
  Result<void> check_declared(const FsView& view, std::optional<uint64_t> declared) const;

  // Reactor-owned: only reconfigure() changes it, on the reactor; other threads read
  // fields reconfigure never changes, or take the published snapshot (config()).
  DaemonConfig config_;
  std::atomic<std::shared_ptr<const DaemonConfig>> published_;
  store::Store& store_;
  Tenants tenants_{store_};
  Secrets secrets_{store_, config_.state_dir + "/secrets.key"};
  rootfs::TemplateStore templates_;
  rootfs::VolumeStore volumes_;
  std::unique_ptr<runtime::Backend> backend_;
  // The host-wide grant ledger (admission.ledger_dir; null when ""): sessions take
  // through admission_ on the reactor, build steps on the build thread (thread-safe).
  // Outlives both.
  std::unique_ptr<HostLedger> ledger_;
  std::string output_dir_;
  // The recorder outlives the proxy that reports to it.
  std::unique_ptr<EgressRecorder> egress_recorder_;
  std::unique_ptr<net::EgressProxy> egress_;
  std::string egress_ca_pem_;  // egress.ca_file, handed to sessions with a door

  boost::asio::io_context reactor_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> reactor_work_;
  std::thread reactor_thread_;
  boost::asio::io_context launcher_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> launcher_work_;
  std::vector<std::thread> launcher_threads_;

  // ---- reactor-only
  Admission admission_;
  std::map<std::string, std::shared_ptr<Session>> sessions_;
  // Final records the store refused (disk full): answered from here and written
  // again until the store takes them. Written on the reactor, read by get()/list():
  // guarded by unrecorded_mu_, a leaf lock held for map access only.
  mutable std::mutex unrecorded_mu_;
  std::map<std::string, store::SessionRecord> unrecorded_;
  std::map<std::string, std::vector<store::ExecRecord>> pending_execs_;  // by session; reactor-only
  std::unique_ptr<boost::asio::steady_timer> retry_timer_, retention_timer_;
  std::vector<std::unique_ptr<WarmPool>> pools_;  // config order
  bool stopping_ = false;
  // Who has each volume ("<tenant>/<name>") mounted: one writer, any readers. Reactor
  // writes; get_volume/list_volumes read under volume_mu_ (a leaf lock).
  struct VolumeUsers {
    std::string writer;
    std::vector<std::string> readers;
  };
  mutable std::mutex volume_mu_;
  std::map<std::string, VolumeUsers> volume_users_;
  // The writable-layer meters of live sessions, for get() on any thread (leaf lock).
  mutable std::mutex meters_mu_;
  struct MeterEntry {
    std::shared_ptr<runtime::DiskMeter> meter;
    uint64_t resets = 0;
  };
  std::map<std::string, MeterEntry> meters_;

  // Live sessions per (tenant, state), for the collector (written on the reactor).
  mutable std::mutex by_state_mu_;
  std::map<std::pair<std::string, std::string>, int64_t> by_state_;
  void count_state(const std::string& tenant, const std::string& from, const std::string& to);
  // Walks of writable layers after execs (files.written), off the reactor.
  boost::asio::thread_pool observer_{1};

  std::shared_ptr<net::PackageGateway> packages_;
  std::string package_keyring_;  // packages.debian_keyring's bytes, read at open

  // Template versions sessions are booting on (tenant/name@version -> count): a
  // version is in use from admission, not only once it is live. Reactor-only.
  std::map<std::string, int> booting_templates_;
  // Snapshots' copies (disk work that must not hold the reactor).
  std::optional<boost::asio::thread_pool> storage_pool_{std::in_place, 1};
  std::unique_ptr<TemplateBuilds> builds_;

  std::atomic<int64_t> live_count_{0};
  std::atomic<bool> full_{false};
  bool shut_down_ = false;
};

}  // namespace cela::session
