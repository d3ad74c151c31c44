// Template builds: steps on a parent template, each run step in a sandbox of its own
// (the session jail: user, mount, pid, net namespaces with only loopback, cgroup
// limits, seccomp), its writable layer captured as a layer. Every layer is cached by
// step_key (rootfs/build_spec.h): a step whose key is in the store is not run again.
//
// A build runs on the calling thread, which it blocks (the daemon gives builds a
// thread of their own; `cela template build` runs one in the foreground); the
// sandboxes' I/O is served by an io_context private to the build.
#pragma once

#include <atomic>
#include <condition_variable>
#include <thread>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "net/package_config.h"
#include "rootfs/build_spec.h"
#include "rootfs/template.h"
#include "runtime/runtime.h"
#include "session/host_ledger.h"
#include "session/templates.h"

namespace cela::net {
class EgressProxy;
}

namespace cela::session {

// How run steps reach package registries: the package gateway (and nothing else)
// through an egress door of the build sandbox, as a session created with `packages`
// reaches it; the build's policy is the gateway's ceiling. The settings files the
// steps are given (apt sources, pip.conf, npmrc) are left out of the layers.
struct BuildPackages {
  net::EgressProxy* proxy = nullptr;
  net::PackageGateway* gateway = nullptr;
  net::PackagesConfig config;
  std::string keyring;  // packages.debian_keyring's bytes ("" = none)
};

// A package gateway and egress proxy of the calling process, for builds without a
// daemon (`cela template build -f` as host root): the upstreams the machine's own apt,
// pip and npm use (net/package_config.h machine_upstreams), mode `gateway`, the cache
// in `cache_dir`. Refused installs are reported to `log`. Both stop with it.
class LocalBuildPackages {
 public:
  static Result<std::unique_ptr<LocalBuildPackages>> open(const std::string& cache_dir,
                                                          std::function<void(const std::string&)> log);
  ~LocalBuildPackages();
  const BuildPackages& packages() const { return packages_; }

 private:
  LocalBuildPackages() = default;
  std::shared_ptr<net::PackageGateway> gateway_;
  std::unique_ptr<net::EgressProxy> proxy_;
  BuildPackages packages_;
};

struct BuildLimits {
  uint64_t memory_mb = 1024;
  double cpus = 1;
  uint64_t pids = 512;
  uint64_t disk_mb = 4096;  // the run step's writable layer (fit to memory like a session's)
  uint64_t step_timeout_s = 1800;
  // Builds a tenant may have queued or running at once (past it: quota_exceeded), and
  // builds queued in all (past it: capacity_exceeded). Queued builds hold their
  // request, `copy` archives included, in memory.
  size_t max_per_tenant = 4;
  size_t max_queued = 32;
};

// Where a build's step jails take their host grant (the memory, pids and open files
// of BuildLimits, as a session's): a step the ledger refuses fails the build with
// capacity_exceeded. Without a ledger, steps are not admitted.
struct BuildAdmission {
  HostLedger* ledger = nullptr;
  HostGrant limit;  // capacity × overcommit
  HostGrant grant(const BuildLimits& limits) const;
};

// What a build reports while it runs (any thread: the build's).
class BuildListener {
 public:
  virtual ~BuildListener() = default;
  virtual void log(const std::string& line) = 0;  // one line, no newline
  virtual void step(size_t index, size_t count, const std::string& what, bool cached) = 0;
};

struct BuildRequest {
  rootfs::BuildSpec spec;
  std::string tenant_id;   // "" = the shared store (the host's operator, `cela template build`)
  bool dev_allowed = false;  // may build on dev-only templates (local root, dev mode)
};

// Runs the build; returns the committed version. `cancel` set: the running step is
// killed and the build fails. Without `packages`, run steps have no network at all.
Result<rootfs::Template> run_build(runtime::Backend& backend, const TemplateCatalog& catalog,
                                   const BuildRequest& request, const BuildLimits& limits, BuildListener& listener,
                                   const std::atomic<bool>& cancel, const BuildPackages* packages = nullptr,
                                   const BuildAdmission& admission = {});

// One build the daemon runs: its log as numbered events (replayed to late followers),
// its state and, at the end, its template or error. Thread-safe.
class BuildJob final : public BuildListener {
 public:
  struct Event {
    std::string type;  // log, step, done, failed
    std::string data;  // text, or JSON for step/done/failed
  };
  // Receives events from index `first`; returns false to stop following.
  using Follower = std::function<bool(size_t index, const Event& event)>;

  BuildJob(std::string id, std::string tenant_id, std::string name);

  const std::string& id() const { return id_; }
  const std::string& tenant_id() const { return tenant_id_; }
  void log(const std::string& line) override;
  void step(size_t index, size_t count, const std::string& what, bool cached) override;
  void finish(const Result<rootfs::Template>& result);

  // Replays events after `after` (-1: from the start) and then delivers new ones
  // until the follower returns false or the build ended (the last event is done or
  // failed).
  void follow(long long after, Follower follower);
  // {id, name, state, created_at, ended_at, steps_done, steps, cached, error, template}
  std::string state_json() const;
  bool ended() const;

 private:
  void push(Event e);

  mutable std::mutex mu_;
  std::string id_, tenant_id_, name_, created_at_, ended_at_;
  std::string state_ = "running";
  std::string error_, template_ref_, digest_;
  size_t steps_ = 0, steps_done_ = 0, cached_ = 0;
  std::vector<Event> events_;
  size_t dropped_ = 0;  // log lines past the cap
  std::vector<Follower> followers_;
};

// The daemon's builds: one build thread, jobs kept in memory (the last 100). The next
// build is the queued one of the tenant whose last turn is oldest, so one tenant's queue
// does not hold back another's. Thread-safe: start() and find() from any thread.
class TemplateBuilds {
 public:
  TemplateBuilds(runtime::Backend& backend, TemplateCatalog catalog, BuildLimits limits,
                 BuildAdmission admission = {});
  ~TemplateBuilds();  // cancels the running build, joins

  // Queues the build; the job is returned at once. quota_exceeded past the tenant's
  // max_per_tenant, capacity_exceeded past max_queued or when the host ledger would
  // not admit a step's jail now (a build queued then may still fail at a step).
  Result<std::shared_ptr<BuildJob>> start(BuildRequest request);
  // not_found for another tenant's build.
  Result<std::shared_ptr<BuildJob>> find(const std::string& tenant_id, const std::string& id) const;

 private:
  void worker();

  runtime::Backend& backend_;
  TemplateCatalog catalog_;
  BuildLimits limits_;
  BuildAdmission admission_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::pair<std::shared_ptr<BuildJob>, BuildRequest>> queue_;
  std::map<std::string, std::shared_ptr<BuildJob>> jobs_;
  std::vector<std::string> order_;
  std::map<std::string, size_t> active_;     // tenant -> its builds queued or running
  std::map<std::string, uint64_t> last_turn_;  // tenant -> when its last build started
  uint64_t turns_ = 0;
  std::atomic<bool> cancel_{false};
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cela::session
