// The rows cela keeps about tenants, API keys, sessions and execs; RFC 3339
// timestamps; random ids. (Their API JSON is api/render.h.)
//
// Records are plain values. Text fields that may be unset (ready_at, ended_at,
// reasons) are "" when unset and serialise as JSON null. Timestamps are RFC 3339 UTC
// with milliseconds, "2026-11-29T10:05:00.123Z", which sort as strings.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/time.h"

namespace cela::store {

// ---- Tenants and keys ----

// Per-tenant ceilings on live sessions and the sum of their limits; 0 = unlimited.
struct Quotas {
  int64_t max_sessions = 0;
  int64_t max_memory_mb = 0;
  double max_cpus = 0;
};

// One attempt through a session's egress door (GET /v1/sessions/{id}/egress).
struct EgressRecord {
  std::string session_id, tenant_id;
  std::string at;    // RFC 3339
  std::string kind;  // connect, http, socks, service
  std::string host, ip;
  int64_t port = 0;
  bool allowed = false;
  std::string rule, reason;
  int64_t bytes_up = 0, bytes_down = 0, duration_ms = 0;
};

// A limit a session's egress hit (kind egress_bandwidth, egress_connections).
struct LimitEventRecord {
  std::string at, kind, detail;
};

// A tenant's network ceiling (admin-set): the rules its sessions' rules must fit.
struct NetworkCeiling {
  std::vector<std::string> allow, deny;
  bool operator==(const NetworkCeiling&) const = default;
};

struct TenantRecord {
  std::string id;  // "t-<16 hex>"
  std::string name;
  Quotas quotas;
  std::string created_at;
};

// An API key as stored: the key itself is never kept, only its sha256.
struct KeyRecord {
  std::string id;  // "k-<16 hex>", safe to show and log
  std::string tenant_id;
  bool admin = false;  // may manage its own tenant (keys, reading the tenant)
  std::string created_at;
  bool revoked = false;
  // Acts across tenants: creates tenants, keys for any tenant, reads every tenant.
  // Implies admin. The bootstrap key is one; local root on the unix socket acts as one.
  bool host_admin = false;
};

// What create_key hands back, once: `key` is the only copy of the plaintext.
struct IssuedKey {
  std::string id;
  std::string key;  // "cela_<64 hex>", or "e2b_<64 hex>" (KeyForm::e2b)
};

// How a new key is spelt: cela's own form, or E2B's (`e2b_<hex>`, what E2B's SDKs
// expect in E2B_API_KEY; docs/e2b.md). The form changes nothing else: both are
// ordinary keys of their tenant, stored hashed, accepted wherever a key is.
enum class KeyForm { cela, e2b };

// ---- Sessions ----

// Session states. starting/ready/running/paused are live (the session holds a
// cgroup, a rootfs and an init); terminated/failed are final.
namespace session_state {
inline constexpr std::string_view starting = "starting";
inline constexpr std::string_view ready = "ready";
inline constexpr std::string_view running = "running";
inline constexpr std::string_view paused = "paused";
inline constexpr std::string_view terminated = "terminated";
inline constexpr std::string_view failed = "failed";
}  // namespace session_state

bool is_session_state(std::string_view state);
bool is_live_session_state(std::string_view state);

// A session's limits as accepted at create (defaults filled in): API.md "limits".
struct SessionLimits {
  double cpus = 1;
  uint64_t memory_mb = 512, disk_mb = 1024, pids = 256;
  uint64_t ttl_s = 3600, idle_timeout_s = 600, exec_timeout_s = 300;
  bool operator==(const SessionLimits&) const = default;
};

// The session's network policy: "none" (loopback only) for now; the egress issue
// adds "allowlist" and its rules.
struct NetworkPolicy {
  std::string mode = "none";
  std::vector<std::string> allow;
  std::vector<std::string> deny;
  bool operator==(const NetworkPolicy&) const = default;
};

// A volume mounted into a session (create body `volumes`).
struct VolumeMountSpec {
  std::string name;
  std::string path;
  bool read_only = false;
  bool operator==(const VolumeMountSpec&) const = default;
};

// What of the accepted create request is kept (never secret values): what recovery
// needs to re-adopt the session.
struct KeptSpec {
  std::string template_name;
  bool allow_sudo = false;
  std::string disk_kind;  // "disk" | "memory" ("" in records older than it)
  std::vector<VolumeMountSpec> volumes;
  uint64_t auto_pause_s = 0;  // pause after this many idle seconds; 0 = never
  bool auto_resume = false;   // an exec or file call on a paused session resumes it
  bool pause_at_ttl = false;  // the TTL pauses the session instead of ending it
  bool operator==(const KeptSpec&) const = default;
};

// What teardown found and did (the DELETE answer's `cleanup`).
struct CleanupReport {
  std::optional<uint64_t> processes_killed;  // unknown after a daemon restart
  bool cgroup_removed = false;
  bool mounts_removed = false;
  bool upper_dir_freed = false;
  uint64_t secrets_wiped = 0;
  // The writable layer's last reading, and for a disk-backed one whether its loop
  // device let go (its image was never linked: gone with its last reference).
  std::optional<uint64_t> disk_used_bytes, disk_written_bytes;
  std::optional<bool> loop_detached;
  uint64_t volumes_released = 0;
  std::string error;  // "" when clean
  bool operator==(const CleanupReport&) const = default;
};

struct SessionRecord {
  std::string id;  // "s-<16 hex>"
  std::string tenant_id;
  std::string state = std::string(session_state::starting);
  std::string template_ref;     // "base@2026.11.29-2"
  SessionLimits limits;
  NetworkPolicy network;
  std::map<std::string, std::string> metadata;
  KeptSpec spec;
  std::string created_at;    // required on insert
  std::string ready_at;
  std::string expires_at;
  std::string last_activity_at;  // for idle_timeout_s
  int64_t idle_timeout_s = 0;    // 0 = none
  std::optional<int64_t> startup_ms;
  int64_t slot = -1;               // host slot (uid range, cpu set...), -1 = none
  std::string cgroup;              // cgroup path of the session, "" = none yet
  int64_t init_pid = 0;            // host pid of the session's init, 0 = none
  std::string termination_reason;  // "deleted", "ttl_expired", "idle_timeout", "init_died", ...
  std::string termination_at;
  std::string termination_message;
  std::optional<CleanupReport> cleanup;  // unset until cleaned up
  // Live readings of the writable layer (not stored: filled in by the session layer
  // for a live session; an ended one's are in `cleanup`).
  std::optional<uint64_t> disk_used_bytes, disk_written_bytes;
  uint64_t resets = 0;  // POST …/reset calls so far (not stored)
};


// ---- Execs ----

namespace exec_state {
inline constexpr std::string_view running = "running";
inline constexpr std::string_view exited = "exited";
inline constexpr std::string_view killed = "killed";
inline constexpr std::string_view timed_out = "timed_out";
inline constexpr std::string_view oom_killed = "oom_killed";
inline constexpr std::string_view failed = "failed";
}  // namespace exec_state

bool is_exec_state(std::string_view state);

struct ExecRecord {
  std::string id;  // "e-<16 hex>"
  std::string session_id;
  std::string tenant_id;
  std::vector<std::string> argv;  // empty when cmd is set
  std::string cmd;                // shell line for /bin/sh -c, "" when argv is set
  std::string cwd;
  std::string user;  // "user" or "root"
  std::string state = std::string(exec_state::running);
  int64_t pid = 0;  // main process inside the sandbox's pid namespace; 0 until started
  std::optional<int64_t> exit_code;
  std::optional<int64_t> signal;
  std::string reason;      // one line: "memory limit 512 MiB reached; killed by OOM"
  std::string started_at;  // required on insert
  std::string ended_at;
  std::optional<int64_t> duration_ms;
  std::optional<int64_t> cpu_ms;
  std::optional<int64_t> peak_memory_bytes;
  std::optional<int64_t> pids_peak;  // most processes alive at once (where the host counts it)
  int64_t stdout_bytes = 0;
  int64_t stderr_bytes = 0;
  bool output_truncated = false;
  bool partial = false;  // produced output, then failed
};


// ---- Secrets ----

// A tenant secret as stored: the value only sealed (AES-256-GCM by the session layer,
// session/secrets.h); the store never sees the plaintext.
struct SecretRecord {
  std::string tenant_id;
  std::string name;
  std::string sealed;      // base64 of nonce | ciphertext | tag
  std::string set_by;      // the key id that set it, "local-root" for the unix socket
  std::string created_at;  // when this value was set
  std::string expires_at;  // "" = never
  int64_t ttl_s = 0;       // 0 = none
};

// Where an exec's captured stream lives on disk; the session layer writes the bytes.
struct OutputRecord {
  std::string exec_id;
  std::string stream;  // "stdout" or "stderr"
  std::string path;
  int64_t bytes = 0;
  bool truncated = false;
};


// ---- Package installs (the package gateway's records) ----

struct PackageInstallRecord {
  int64_t seq = 0;  // order of arrival; the paging cursor
  std::string session_id, tenant_id;
  std::string at;
  std::string manager, name, version, registry, sha256;
  int64_t size = 0;
  std::string verdict;  // allowed, denied, failed
  std::string rule, reason;
  bool cache_hit = false;
};

struct PackageInstallPage {
  std::vector<PackageInstallRecord> records;  // oldest first
  std::string next_cursor;                    // "" when this is the last page
};

// ---- Time and ids ----

// (common/time.h; also reachable as store::now_rfc3339() etc.)
using cela::format_rfc3339;
using cela::now_ms;
using cela::now_rfc3339;
using cela::parse_rfc3339;

// common/random.h random_id: prefix + "-" + 16 lowercase hex characters, "s-1f3a09c2b4d5e6f7".
// Aborts if the CSPRNG fails: without entropy cela cannot issue ids or keys safely.
std::string new_id(std::string_view prefix);

}  // namespace cela::store
