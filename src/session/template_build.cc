#include "session/template_build.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <thread>

#include <filesystem>

#include "common/encoding.h"
#include "common/nofile.h"
#include "common/sha256.h"
#include "net/egress_proxy.h"
#include "net/package_gateway.h"
#include "rootfs/layers.h"
#include "session/exec_env.h"
#include "session/packages.h"
#include "session/session_fs.h"
#include "store/records.h"

namespace cela::session {
namespace asio = boost::asio;
namespace json = boost::json;
using rootfs::BuildStep;
using rootfs::StepKind;

namespace {

constexpr size_t kMaxEvents = 20000;

// Output of one run step, cut into lines for the log.
class StepOutput final : public runtime::ExecListener {
 public:
  StepOutput(BuildListener& listener, bool capture) : listener_(listener), capture_(capture) {}
  void on_started(pid_t) override {}
  void on_start_failed(const runtime::StartFailure& f) override {
    failure = "could not start (" + std::string(runtime::to_string(f.step)) + ": " + std::strerror(f.err) + ")";
    exited = out_eof = err_eof = true;
  }
  void on_output(runtime::Stream stream, std::string_view data) override {
    if (capture_ && stream == runtime::Stream::stdout_stream) captured.append(data);
    std::string& buf = stream == runtime::Stream::stdout_stream ? out_ : err_;
    buf.append(data);
    size_t nl;
    while ((nl = buf.find('\n')) != std::string::npos) {
      emit(buf.substr(0, nl));
      buf.erase(0, nl + 1);
    }
    if (buf.size() > 4096) emit(std::exchange(buf, {}));
  }
  void on_output_end(runtime::Stream stream) override {
    std::string& buf = stream == runtime::Stream::stdout_stream ? out_ : err_;
    if (!buf.empty()) emit(std::exchange(buf, {}));
    (stream == runtime::Stream::stdout_stream ? out_eof : err_eof) = true;
  }
  void on_exited(int wait_status) override {
    status = wait_status;
    exited = true;
  }

  bool exited = false, out_eof = false, err_eof = false;
  int status = 0;
  std::string failure, captured;

 private:
  void emit(const std::string& line) {
    if (!capture_) listener_.log("  " + line);
  }
  BuildListener& listener_;
  bool capture_;
  std::string out_, err_;
};

struct BuildState {
  std::vector<std::string> layers;
  std::vector<rootfs::LayerMeta> meta;
  std::vector<std::pair<std::string, std::string>> env;
  std::string workdir;
  rootfs::TemplateUser account;
  bool as_root = true;  // run steps run as root until a USER step names someone else
  std::string key;

  std::vector<std::string> env_list() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : env) out.push_back(k + "=" + v);
    return out;
  }
  // What a run step's result depends on besides its command and its parent.
  std::string context() const {
    std::string c = as_root ? "root" : account.name + ":" + std::to_string(account.uid);
    c += "\nworkdir " + workdir;
    for (const auto& kv : env_list()) c += "\nenv " + kv;
    return c;
  }
  void set_env(const std::string& k, const std::string& v) {
    for (auto& [key, value] : env)
      if (key == k) {
        value = v;
        return;
      }
    env.emplace_back(k, v);
  }
};

std::string join_path(const std::string& base, const std::string& p) {
  if (p.starts_with("/")) return p;
  std::string b = base.empty() ? "/" : base;
  return b.ends_with("/") ? b + p : b + "/" + p;
}

class Builder {
 public:
  Builder(runtime::Backend& backend, const BuildLimits& limits, BuildListener& listener,
          const std::atomic<bool>& cancel, std::vector<std::pair<std::string, std::string>> binds,
          const BuildPackages* packages, std::string tenant_id, const BuildAdmission& admission)
      : backend_(backend),
        admission_(admission),
        limits_(limits),
        listener_(listener),
        cancel_(cancel),
        binds_(std::move(binds)),
        packages_(packages),
        tenant_id_(std::move(tenant_id)) {}

  // Runs `cmd` on the stack in a fresh sandbox. With `layer`, its writable layer is
  // copied there (frozen first). With `capture`, stdout is returned instead of logged.
  Result<std::string> run(const BuildState& st, const std::string& cmd, bool as_root, const std::string* layer,
                          bool capture) {
    runtime::InstanceSpec is;
    is.name = store::new_id("b");
    is.hostname = "cela-build";
    is.rootfs.layers = st.layers;
    is.rootfs.binds = binds_;
    is.disk_bytes = limits_.disk_mb << 20;
    is.limits = {limits_.memory_mb << 20, limits_.cpus, limits_.pids};
    const bool door = packages_ && layer;  // only steps that make a layer install anything
    if (door) is.door_port = net::kDoorPort;
    // Held until the sandbox is gone (declared first: dropped last).
    HeldGrant held;
    if (admission_.ledger) {
      auto h = HeldGrant::take(*admission_.ledger, admission_.grant(limits_), admission_.limit);
      if (!h) return std::unexpected(h.error());
      held = std::move(*h);
    }
    auto instance = backend_.start(is);
    if (!instance) return std::unexpected(instance.error());
    auto& inst = **instance;
    asio::io_context io;
    std::string died;
    inst.attach(io, [&](std::string why) { died = std::move(why); });
    bool door_open = false;
    auto destroy = [&] {
      if (door_open) {
        packages_->proxy->close_door(is.name);
        packages_->gateway->remove_session(is.name);
      }
      inst.destroy();
    };
    std::vector<std::string> extra_env;
    if (door) {
      if (auto w = write_package_files(inst, packages_->config, packages_->keyring); !w)
        return destroy(), std::unexpected(w.error());
      packages_->gateway->add_session(is.name, tenant_id_, packages_->config.ceiling);
      if (auto d = packages_->proxy->open_door(is.name, tenant_id_, inst.take_door(), net::EgressPolicy{}); !d) {
        packages_->gateway->remove_session(is.name);
        return destroy(), std::unexpected(d.error());
      }
      door_open = true;
      extra_env = package_env();
    }

    ExecEnvInput in;
    in.cmd = cmd;
    in.user = as_root ? ExecUser::root : ExecUser::user;
    in.cwd = st.workdir.empty() ? "/" : st.workdir;
    in.base_env = st.env_list();
    in.base_env.insert(in.base_env.end(), extra_env.begin(), extra_env.end());
    in.fsize_bytes = limits_.disk_mb << 20;
    auto spec = process_spec(st.account, in);
    if (!spec) return destroy(), std::unexpected(spec.error());
    StepOutput out(listener_, capture);
    auto exec = inst.exec(*spec, out);
    if (!exec) return destroy(), std::unexpected(exec.error());
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limits_.step_timeout_s);
    std::optional<std::chrono::steady_clock::time_point> drain_until;
    std::string stopped;
    while (!(out.exited && out.out_eof && out.err_eof) && died.empty()) {
      io.run_one_for(std::chrono::milliseconds(100));
      auto now = std::chrono::steady_clock::now();
      if (cancel_) stopped = "the build was cancelled";
      else if (now > deadline) stopped = "the step ran past " + std::to_string(limits_.step_timeout_s) + " s";
      if (!stopped.empty()) {
        (void)(*exec)->kill_tree();
        break;
      }
      // Background processes may keep the pipes open after the command exited.
      if (out.exited && !drain_until) drain_until = now + std::chrono::seconds(1);
      if (drain_until && now > *drain_until) break;
    }
    (*exec)->stop_output();
    if (!stopped.empty()) return destroy(), fail(ErrorCode::limit, stopped);
    if (!died.empty() && !out.exited) return destroy(), fail(ErrorCode::system, "the build sandbox died: " + died);
    if (!out.failure.empty()) return destroy(), fail(ErrorCode::invalid_argument, out.failure);
    if (!WIFEXITED(out.status) || WEXITSTATUS(out.status) != 0) {
      std::string how = WIFEXITED(out.status) ? "exited with status " + std::to_string(WEXITSTATUS(out.status))
                                              : "was killed by signal " + std::to_string(WTERMSIG(out.status));
      return destroy(), fail(ErrorCode::invalid_argument, "the command " + how);
    }
    if (layer) {
      std::optional<Result<void>> frozen;
      inst.freeze(true, [&](Result<void> r) { frozen = std::move(r); });
      while (!frozen) io.run_one_for(std::chrono::milliseconds(100));
      if (!*frozen) return destroy(), std::unexpected(frozen->error());
      auto upper = inst.open_writable_layer();
      if (!upper) return destroy(), std::unexpected(upper.error());
      auto copied = rootfs::copy_layer_tree(upper->get(), *layer, {inst.host_id(0), 65536});
      if (!copied) return destroy(), std::unexpected(copied.error());
      if (door) drop_package_files(*layer);
    }
    exec->reset();
    destroy();
    return std::move(out.captured);
  }

 private:
  // The gateway settings the step was given stay out of its layer (the stack below
  // shows through again); a directory only when nothing else is in it.
  void drop_package_files(const std::string& layer) const {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (const auto& f : package_files(packages_->config, packages_->keyring)) fs::remove(layer + f.path, ec);
    for (std::string_view dir : {kPackageSourceParts, std::string_view("/etc/apt/keyrings")}) fs::remove(layer + std::string(dir), ec);
  }

  runtime::Backend& backend_;
  const BuildAdmission& admission_;
  const BuildLimits& limits_;
  BuildListener& listener_;
  const std::atomic<bool>& cancel_;
  std::vector<std::pair<std::string, std::string>> binds_;
  const BuildPackages* packages_;
  std::string tenant_id_;
};

}  // namespace

Result<rootfs::Template> run_build(runtime::Backend& backend, const TemplateCatalog& catalog,
                                   const BuildRequest& request, const BuildLimits& limits, BuildListener& listener,
                                   const std::atomic<bool>& cancel, const BuildPackages* packages,
                                   const BuildAdmission& admission) {
  const rootfs::BuildSpec& spec = request.spec;
  if (request.tenant_id.empty()) {
    if (!rootfs::valid_template_name(spec.name) || spec.name == "base" || spec.name == rootfs::kHostTemplate)
      return fail(ErrorCode::invalid_argument, "bad template name `" + spec.name + "`");
  } else if (auto ok = catalog.writable_name(spec.name); !ok) {
    return std::unexpected(ok.error());
  }
  auto parent = catalog.resolve(request.tenant_id, spec.from);
  if (!parent) {
    if (parent.error().code == ErrorCode::not_found)
      return fail(ErrorCode::invalid_argument, "unknown template `" + spec.from + "` (FROM)");
    return std::unexpected(parent.error());
  }
  if (parent->dev_only && !request.dev_allowed)
    return fail(ErrorCode::permission_denied, "template `" + spec.from + "` is dev-only");
  rootfs::TemplateStore store = request.tenant_id.empty() ? catalog.shared() : catalog.private_store(request.tenant_id);
  auto lock = rootfs::StoreLock::shared(store);
  if (!lock) return std::unexpected(lock.error());

  for (const auto& note : spec.notes) listener.log("note: " + note);
  listener.log("FROM " + parent->name + "@" + parent->version + " (" + parent->digest.substr(0, 19) + ")");
  BuildState st;
  st.layers = parent->layers;
  st.meta = parent->layer_meta;
  for (const auto& kv : parent->env) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) st.env.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  st.workdir = parent->workdir;
  st.account = parent->user;
  st.key = parent->digest;
  std::vector<std::pair<std::string, std::string>> binds;
  for (const auto& b : parent->binds) binds.emplace_back(b.source, b.target);
  Builder builder(backend, limits, listener, cancel, binds, packages, request.tenant_id, admission);
  if (packages) listener.log("run steps reach the package gateway (" + std::string(net::kPackagesHost) + ")");
  uint64_t added = 0;
  const size_t count = spec.steps.size();

  for (size_t i = 0; i < count; ++i) {
    if (cancel) return fail(ErrorCode::limit, "the build was cancelled");
    BuildStep step = spec.steps[i];
    std::string what = rootfs::describe(step);
    auto step_failed = [&](const Error& e) {
      return fail(e.code, "step " + std::to_string(i + 1) + "/" + std::to_string(count) + " (" + what +
                              (step.line ? ", line " + std::to_string(step.line) : "") + "): " + e.message());
    };
    if (step.kind == StepKind::workdir) step.text = join_path(st.workdir, step.text);
    st.key = rootfs::step_key(st.key, step, st.context());
    if (step.kind == StepKind::env) {
      for (const auto& [k, v] : step.env) st.set_env(k, v);
      listener.step(i, count, what, false);
      continue;
    }
    if (step.kind == StepKind::user) {
      listener.step(i, count, what, false);
      if (step.text == "root" || step.text == "0") {
        st.as_root = true;
        continue;
      }
      auto line = builder.run(st, "getent passwd " + step.text, true, nullptr, true);
      if (!line) return step_failed(Error{ErrorCode::invalid_argument, 0, "no user `" + step.text + "` in the image"});
      auto user = rootfs::passwd_account(*line);
      if (!user || user->name != step.text)
        return step_failed(Error{ErrorCode::invalid_argument, 0,
                                 "`" + step.text + "` is not an account with uid and gid in 1..65535"});
      st.account = *user;
      st.as_root = false;
      continue;
    }
    // run, copy and workdir make a layer, unless the store has it already. A workdir
    // step's mkdir runs where the previous steps ran; later steps run in the new dir.
    struct NextWorkdir {
      BuildState& st;
      const BuildStep& step;
      ~NextWorkdir() {
        if (step.kind == StepKind::workdir) st.workdir = step.text;
      }
    } next_workdir{st, step};
    if (auto cached = rootfs::read_layer_meta(store, st.key)) {
      listener.step(i, count, what, true);
      st.layers.push_back(rootfs::layer_path(store, st.key));
      st.meta.push_back(*cached);
      added += cached->size_bytes;
      continue;
    }
    listener.step(i, count, what, false);
    auto layer = rootfs::StagedLayer::create(store);
    if (!layer) return std::unexpected(layer.error());
    if (step.kind == StepKind::copy) {
      UniqueFd dir(::open(layer->dir().c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
      if (!dir) return sys_fail("open " + layer->dir());
      FsLimits fl;
      fl.max_archive_bytes = 4ull << 30;
      SessionFs fs(std::move(dir), 0, 0, fl);
      if (auto r = fs.mkdir(step.to, true); !r) return step_failed(r.error());
      bool given = false;
      auto imported = fs.import_tar(step.to, [&]() -> Result<std::string_view> {
        if (given) return std::string_view();
        given = true;
        return std::string_view(step.archive);
      });
      if (!imported) return step_failed(imported.error());
      listener.log("  " + std::to_string(*imported) + " entries into " + step.to);
    } else {
      std::string cmd = step.kind == StepKind::workdir ? "mkdir -p -- '" + step.text + "'" : step.text;
      bool as_root = step.kind == StepKind::workdir || st.as_root;
      const std::string& dir = layer->dir();
      if (auto r = builder.run(st, cmd, as_root, &dir, false); !r) return step_failed(r.error());
    }
    auto digest = rootfs::layer_digest(layer->dir());
    if (!digest) return std::unexpected(digest.error());
    rootfs::LayerMeta meta{*digest, rootfs::tree_bytes(layer->dir()), what};
    auto path = layer->commit(st.key);
    if (!path) return std::unexpected(path.error());
    if (auto w = rootfs::write_layer_meta(store, st.key, meta); !w) return std::unexpected(w.error());
    st.layers.push_back(*path);
    st.meta.push_back(meta);
    added += meta.size_bytes;
  }

  // The manifest-only inputs (aliases, start command) count too: a changed start
  // command is a new version with the same layers.
  std::optional<rootfs::StartCommand> start = spec.start ? spec.start : parent->start;
  if (!spec.aliases.empty() || spec.start) {
    std::string extra = st.key;
    for (const auto& a : spec.aliases) extra += "\nalias " + a;
    if (spec.start)
      extra += "\nstart " + spec.start->user + ":" + std::to_string(spec.start->ready_port) + ":" +
               std::to_string(spec.start->ready_timeout_s) + ":" + spec.start->cmd;
    st.key = sha256_hex(extra);
  }
  // The same inputs on the same parent: the current version is this build already.
  if (auto current = rootfs::load_template(store, spec.name); current && current->recipe == st.key) {
    listener.log("up to date: " + spec.name + "@" + current->version);
    current->tenant = request.tenant_id;
    return current;
  }
  rootfs::Template t = *parent;
  t.layers = st.layers;
  t.layer_meta = st.meta;
  t.env = st.env_list();
  t.workdir = st.workdir;
  t.user = st.account;
  t.size_bytes = parent->size_bytes + added;
  t.parent = parent->name + "@" + parent->version;
  t.source = "build";
  t.recipe = st.key;
  t.aliases = spec.aliases;  // never the parent's: they name that template
  t.start = start;
  auto committed =
      rootfs::commit_stacked_version(store, spec.name, std::move(t), request.tenant_id.empty() ? "host" : request.tenant_id);
  if (!committed) return committed;
  committed->tenant = request.tenant_id;
  listener.log("built " + committed->name + "@" + committed->version + " (" + committed->digest.substr(0, 19) + ")");
  return committed;
}

// ---- LocalBuildPackages ------------------------------------------------------------

Result<std::unique_ptr<LocalBuildPackages>> LocalBuildPackages::open(const std::string& cache_dir,
                                                                     std::function<void(const std::string&)> log) {
  auto config = net::parse_packages_config(nullptr, "");
  if (!config) return std::unexpected(config.error());
  config->gateway.cache_dir = cache_dir;
  auto gateway = net::PackageGateway::open(config->gateway, [log](const net::InstallEvent& e) {
    if (e.verdict != "allowed") log("  package " + e.name + " " + e.version + " " + e.verdict + ": " + e.reason);
  });
  if (!gateway) return std::unexpected(gateway.error());
  auto proxy = net::EgressProxy::start(net::EgressConfig{}, {}, nullptr);
  if (!proxy) return std::unexpected(proxy.error());
  std::unique_ptr<LocalBuildPackages> out(new LocalBuildPackages());
  out->gateway_ = std::shared_ptr<net::PackageGateway>(std::move(*gateway));
  out->proxy_ = std::move(*proxy);
  out->proxy_->add_service(out->gateway_);
  out->packages_ = BuildPackages{out->proxy_.get(), out->gateway_.get(), std::move(*config), ""};
  return out;
}

LocalBuildPackages::~LocalBuildPackages() {
  if (proxy_) proxy_->stop();
}

// ---- BuildJob ----------------------------------------------------------------------

BuildJob::BuildJob(std::string id, std::string tenant_id, std::string name)
    : id_(std::move(id)), tenant_id_(std::move(tenant_id)), name_(std::move(name)), created_at_(now_rfc3339()) {}

void BuildJob::push(Event e) {
  std::lock_guard lock(mu_);
  bool final = e.type == "done" || e.type == "failed";
  if (!final && events_.size() >= kMaxEvents) {
    ++dropped_;
    return;
  }
  size_t index = events_.size();
  events_.push_back(std::move(e));
  // Followers are called under the lock, so each sees every event once, in order
  // (they only queue the event on their stream).
  std::erase_if(followers_, [&](Follower& f) { return !f(index, events_.back()) || final; });
}

void BuildJob::log(const std::string& line) { push({"log", line}); }

void BuildJob::step(size_t index, size_t count, const std::string& what, bool cached) {
  {
    std::lock_guard lock(mu_);
    steps_ = count;
    steps_done_ = index;
    cached_ += cached;
  }
  json::object o{{"index", index + 1}, {"count", count}, {"step", what}, {"cached", cached}};
  push({"step", json::serialize(o)});
}

void BuildJob::finish(const Result<rootfs::Template>& result) {
  {
    std::lock_guard lock(mu_);
    ended_at_ = now_rfc3339();
    if (result) {
      state_ = "succeeded";
      steps_done_ = steps_;
      template_ref_ = result->name + "@" + result->version;
      digest_ = result->digest;
    } else {
      state_ = "failed";
      error_ = result.error().message();
    }
  }
  push({result ? "done" : "failed", state_json()});
}

bool BuildJob::ended() const {
  std::lock_guard lock(mu_);
  return state_ != "running";
}

void BuildJob::follow(long long after, Follower follower) {
  std::lock_guard lock(mu_);
  for (size_t i = after < 0 ? 0 : static_cast<size_t>(after) + 1; i < events_.size(); ++i)
    if (!follower(i, events_[i])) return;
  if (state_ != "running") return;
  followers_.push_back(std::move(follower));
}

std::string BuildJob::state_json() const {
  std::lock_guard lock(mu_);
  json::object o{{"id", id_},
                 {"name", name_},
                 {"state", state_},
                 {"created_at", created_at_},
                 {"ended_at", ended_at_.empty() ? json::value(nullptr) : json::value(ended_at_)},
                 {"steps", steps_},
                 {"steps_done", steps_done_},
                 {"cached_steps", cached_},
                 {"log_lines_dropped", dropped_},
                 {"error", error_.empty() ? json::value(nullptr) : json::value(error_)},
                 {"template", template_ref_.empty() ? json::value(nullptr) : json::value(template_ref_)},
                 {"digest", digest_.empty() ? json::value(nullptr) : json::value(digest_)}};
  return json::serialize(o);
}

// ---- TemplateBuilds ----------------------------------------------------------------

HostGrant BuildAdmission::grant(const BuildLimits& limits) const {
  return HostGrant::of(limits.memory_mb, limits.pids, nofile_grant(ExecEnvInput{}.nofile));
}

TemplateBuilds::TemplateBuilds(runtime::Backend& backend, TemplateCatalog catalog, BuildLimits limits,
                               BuildAdmission admission)
    : backend_(backend),
      catalog_(std::move(catalog)),
      limits_(limits),
      admission_(admission),
      thread_([this] { worker(); }) {}

TemplateBuilds::~TemplateBuilds() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cancel_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<std::shared_ptr<BuildJob>> TemplateBuilds::start(BuildRequest request) {
  // A host with no room for a step's jail now refuses at once (503), rather than
  // queueing a build whose first run step would fail.
  if (admission_.ledger) {
    if (auto fits = admission_.ledger->check(admission_.grant(limits_), admission_.limit); !fits)
      return std::unexpected(fits.error());
  }
  auto job = std::make_shared<BuildJob>(store::new_id("b"), request.tenant_id, request.spec.name);
  {
    std::lock_guard lock(mu_);
    if (stop_) return fail(ErrorCode::capacity_exceeded, "the daemon is stopping");
    if (queue_.size() >= limits_.max_queued)
      return fail(ErrorCode::capacity_exceeded, std::to_string(queue_.size()) + " template builds are queued (at most " +
                                                    std::to_string(limits_.max_queued) + "): retry later");
    size_t& mine = active_[request.tenant_id];
    if (mine >= limits_.max_per_tenant)
      return fail(ErrorCode::quota_exceeded, "the tenant has " + std::to_string(mine) +
                                                 " template builds queued or running (at most " +
                                                 std::to_string(limits_.max_per_tenant) + ")");
    ++mine;
    jobs_[job->id()] = job;
    order_.push_back(job->id());
    while (order_.size() > 100) {
      auto it = jobs_.find(order_.front());
      if (it != jobs_.end() && !it->second->ended()) break;
      if (it != jobs_.end()) jobs_.erase(it);
      order_.erase(order_.begin());
    }
    queue_.emplace_back(job, std::move(request));
  }
  job->log("queued");
  cv_.notify_all();
  return job;
}

Result<std::shared_ptr<BuildJob>> TemplateBuilds::find(const std::string& tenant_id, const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end() || it->second->tenant_id() != tenant_id) return fail(ErrorCode::not_found, "no build " + id);
  return it->second;
}

void TemplateBuilds::worker() {
  for (;;) {
    std::pair<std::shared_ptr<BuildJob>, BuildRequest> next;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) {
        for (auto& [job, req] : queue_) job->finish(fail(ErrorCode::capacity_exceeded, "the daemon is stopping"));
        queue_.clear();
        return;
      }
      // The tenant whose last turn is oldest goes next (a tenant never served first);
      // within a tenant, its oldest build.
      auto pick = std::ranges::min_element(queue_, {}, [&](const auto& q) {
        auto it = last_turn_.find(q.second.tenant_id);
        return it == last_turn_.end() ? 0 : it->second;
      });
      next = std::move(*pick);
      queue_.erase(pick);
      last_turn_[next.second.tenant_id] = ++turns_;
    }
    auto& [job, request] = next;
    job->log("building " + request.spec.name + " from " + request.spec.from);
    auto started = std::chrono::steady_clock::now();
    auto result = run_build(backend_, catalog_, request, limits_, *job, cancel_, nullptr, admission_);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char took[64];
    std::snprintf(took, sizeof took, "%.2f s", s);
    job->log(result ? std::string("finished in ") + took : "failed after " + std::string(took) + ": " + result.error().message());
    job->finish(result);
    std::lock_guard lock(mu_);
    if (auto it = active_.find(request.tenant_id); it != active_.end() && --it->second == 0) active_.erase(it);
  }
}

}  // namespace cela::session
