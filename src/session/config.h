// DaemonConfig: everything `cela serve` can be told, with embedded defaults that
// work on one machine with no file at all. Loaded from a JSON file (docs/operations.md
// lists every key); unknown keys are an error so a typo never silently does nothing.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "common/error.h"
#include "obs/audit.h"
#include "net/egress_proxy.h"
#include "net/package_config.h"
#include "session/types.h"

namespace cela::session {

struct SessionDefaults {
  double cpus = 1.0;
  uint64_t memory_mb = 512;
  uint64_t disk_mb = 1024;
  uint64_t pids = 256;
  uint64_t ttl_s = 3600;
  uint64_t idle_timeout_s = 600;
  uint64_t exec_timeout_s = 300;
};

struct SessionMaxima {  // what a create request may ask for at most
  double cpus = 4.0;
  uint64_t memory_mb = 8192;
  uint64_t disk_mb = 16384;
  uint64_t pids = 4096;
  uint64_t ttl_s = 86400;
  uint64_t exec_timeout_s = 3600;
};

struct TenantQuotaDefaults {  // quotas of tenants created without explicit ones
  int64_t max_sessions = 50;
  int64_t max_memory_mb = 32768;
  double max_cpus = 4.0;  // per session
};

// Kernel budgets every session gets besides its cgroup limits (docs/operations.md,
// docs/security.md "Kernel budgets").
struct SessionBudgets {
  uint64_t sigpending = 4096;           // RLIMIT_SIGPENDING, for the whole session
  uint64_t msgqueue_bytes = 819200;     // RLIMIT_MSGQUEUE
  uint64_t memlock_bytes = 8ull << 20;  // RLIMIT_MEMLOCK
  uint64_t ptys = 64;                   // max= of the session's devpts
  // /proc/sys/user limits of the session's user namespace, over the built-in ones
  // (names checked when the daemon starts).
  std::map<std::string, uint64_t> user_namespace;
};

// Block I/O weight and throttles of every session, where the host's cgroups offer
// them (0 = none). They apply to the disks holding `devices` (paths), by default those
// of the template store and the state directory.
struct BlockIoConfig {
  uint64_t weight = 0;
  uint64_t read_bps = 0, write_bps = 0, read_iops = 0, write_iops = 0;
  std::vector<std::string> devices;
};

// Host admission: the sum of what live sessions are granted (memory limit, pids,
// open files) stays within what the host has times an overcommit ratio; past it,
// creates answer 503 capacity_exceeded. Other cela processes' grants count too,
// through the ledger in `ledger_dir`.
struct AdmissionConfig {
  double memory_overcommit = 2.0;
  double pids_overcommit = 2.0;
  double files_overcommit = 64.0;
  // What the host has; 0 = measured at start (MemTotal, min(pid_max, threads-max),
  // fs.file-max).
  uint64_t host_memory_mb = 0, host_pids = 0, host_files = 0;
  // The host-wide ledger every cela process on the host (daemons, `cela run`, template
  // builds) records its grants in (session/host_ledger.h); "" = this daemon's alone.
  std::string ledger_dir = "/run/cela/grants";
};

// The HTTP edge (docs/operations.md "Connections", api/connection_slots.h). A count of 0
// is derived from RLIMIT_NOFILE at start.
struct ConnectionConfig {
  uint64_t max_total = 0;     // open connections, every transport
  uint64_t per_peer = 0;      // per TCP address (IPv6: per /64) or unix uid
  uint64_t per_key = 0;       // requests in flight per API key, streams included
  uint64_t root_reserve = 0;  // of max_total: only local root on the unix socket
  uint64_t reserve_fds = 0;   // descriptors connections never take (sessions, store)
  double header_timeout_s = 10;  // a request header (and a new connection's first byte)
  double idle_timeout_s = 60;    // a keep-alive connection between requests
  double ws_ping_s = 15;         // a WebSocket pings this often; a silent peer is cut after two
  uint64_t ws_queue_bytes = 8 << 20;  // a WebSocket's outgoing queue; a client past it is cut off
};

// Writable layers (docs/operations.md "Storage"): `kind` is what a create that does not
// say gets ("disk": an ext4 image per session, limit enforced by the kernel, not
// memory; "memory": a tmpfs counted against the memory limit). The pool keeps `pool`
// layers of defaults.disk_mb ready. `dir` "" = <state_dir>/disks.
struct DiskConfig {
  std::string kind = "disk";
  uint64_t pool = 2;
  std::string dir;
};

// Volumes: persistent ext4 images owned by a tenant, under `dir` ("" =
// <state_dir>/volumes); sizes up to max_size_mb, at most max_per_tenant of them.
struct VolumeConfig {
  std::string dir;
  uint64_t max_size_mb = 16384;
  uint64_t max_per_tenant = 32;
};

// A warm pool (`pools: [{template, size, limits}]`, session/pool.cc): `size` sessions of
// `template` with these sandbox limits kept booted and ready; a create of the same shape
// (template and cpus, memory_mb, disk_mb, pids) claims one. Limits not given are the
// defaults', so `{"template": "base", "size": 4}` serves creates that ask for none.
struct PoolConfig {
  std::string template_name;
  uint64_t size = 0;
  double cpus = 1.0;
  uint64_t memory_mb = 512, disk_mb = 1024, pids = 256;
};

// GET /metrics and the per-session metrics (docs/operations.md "Observability").
struct MetricsConfig {
  bool public_endpoint = false;  // GET /metrics without a key (else host admin only)
  double sample_interval_s = 10;  // per-session history sampler; 0 = no history
  uint64_t history_samples = 60;
};

// The port proxy (`ports`: ANY /v1/sessions/{id}/ports/{port}/...).
struct PortsConfig {
  uint64_t max_connections = 32;  // proxied connections open at once per session; past it 429
  double connect_timeout_s = 5;   // to 127.0.0.1:PORT inside
  double idle_timeout_s = 120;    // no byte either way for this long ends a proxied exchange
};

struct DaemonConfig {
  std::string state_dir = "/var/lib/cela/state";
  std::string templates_dir = "/var/lib/cela/templates";
  std::string socket_path = "/run/cela/cela.sock";
  std::string listen = "127.0.0.1:8080";  // "" disables TCP
  std::string default_template = "base";
  int64_t max_sessions = 100;               // host-wide
  uint64_t output_cap_bytes = 16ull << 20;  // per exec and stream
  uint64_t max_body_bytes = 1ull << 20;     // JSON bodies
  uint64_t max_upload_bytes = 256ull << 20; // file uploads and archives
  // Kept exec output and the records of ended sessions are deleted this many days
  // after the session ended (API.md `output_retention.days`); 0 keeps them forever.
  double output_retention_days = 7;
  // How many host uid slots (65,536 ids each) this daemon may use; creates past them
  // answer 503. Lower it to share a host's slots between daemons.
  uint64_t uid_slots = 32768;
  // A stdin write the process does not take within this bound answers request_timeout.
  uint64_t stdin_timeout_s = 30;
  // Every exec's RLIMIT_NOFILE (soft and hard), at most the daemon's hard limit.
  uint64_t exec_nofile = 4096;
  int http_threads = 2;
  // Threads that boot sandboxes; each lives as long as the daemon (inits die with the
  // thread that cloned them).
  int launcher_threads = 4;
  int blocking_threads = 16;
  // Dev mode (`dev_mode`, `cela serve --dev`): dev-only templates (`host`: the host's
  // /usr inside) exist, for local root on the unix socket only. Off: no session can
  // be created on them.
  bool dev_mode = false;
  SessionDefaults defaults;
  SessionMaxima maxima;
  TenantQuotaDefaults quotas;
  SessionBudgets budgets;
  BlockIoConfig block_io;
  AdmissionConfig admission;
  ConnectionConfig connections;
  std::vector<PoolConfig> pools;
  obs::AuditOptions audit;
  MetricsConfig metrics;
  bool json_logs = true;  // daemon log lines as JSON (`logs.format`: "json" | "text")
  std::string log_level = "info";  // `logs.level`: lines below it are dropped (debug|info|warn|error)
  // The egress proxy (docs/operations.md "Egress").
  net::EgressConfig egress;
  // Tenant defaults of every session's file policy (`files`: API.md "File policy");
  // a create may narrow them.
  FilePolicy files;

  DiskConfig disk;
  VolumeConfig volumes;

  std::string disks_dir() const { return disk.dir.empty() ? state_dir + "/disks" : disk.dir; }
  std::string volumes_dir() const { return volumes.dir.empty() ? state_dir + "/volumes" : volumes.dir; }

  // The package gateway (`packages`): upstreams, cache, and every tenant's ceiling.
  net::PackagesConfig packages;
  PortsConfig ports;

  // Reads a JSON config file over the defaults.
  static Result<DaemonConfig> load(const std::string& path);
  static Result<DaemonConfig> from_json(const boost::json::object& object);
};

}  // namespace cela::session
