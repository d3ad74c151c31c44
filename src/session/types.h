// The typed boundary of the session layer: what callers ask for (specs) and what
// they get back (records, outcomes). The API parses JSON into these and renders the
// records; nothing below the API sees JSON request bodies.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "net/package_policy.h"
#include "store/records.h"

namespace cela::session {

// Who is asking: every lookup is scoped to the tenant (another tenant's id is
// not_found, never forbidden).
struct Caller {
  std::string tenant_id;
  bool admin = false;
  bool local_root = false;  // root on the unix socket (no key): the host's operator
};

// The records the session layer hands out (stored by store/, rendered by api/), and
// the limits a session runs under.
using store::CleanupReport;
using store::ExecRecord;
using store::IssuedKey;
using store::KeyRecord;
using store::NetworkPolicy;
using store::PackageInstallPage;
using store::PackageInstallRecord;
using store::Quotas;
using store::SessionLimits;
using store::SessionRecord;
using store::TenantRecord;

// One secret grant of a create request (`secrets: [...]`, API.md "Secrets").
struct SecretGrantSpec {
  std::string name;
  bool as_file = false;  // false: env
  std::string env;       // env mode: the variable (default: the name)
  std::string path;      // file mode: /run/secrets/<file> (default: /run/secrets/NAME)
  uint64_t ttl_s = 0;    // 0: the session's life
};

// What may be written into a session and what may leave it (API.md "File policy").
// Patterns are absolute paths, "/dir/**" for a whole tree.
enum class SecretScan { refuse, redact, off };
struct FilePolicy {
  std::vector<std::string> writable{"/**"};
  std::vector<std::string> exportable{"/**"};
  uint64_t max_upload_bytes = 256ull << 20;
  uint64_t max_export_bytes = 256ull << 20;
  SecretScan scan_secrets = SecretScan::refuse;
};

// A volume of the caller's tenant to show at `path` (absolute; validated by the API).
using store::VolumeMountSpec;

// POST /v1/sessions, validated against the daemon's maxima by the API.
struct CreateSessionSpec {
  std::string template_name;
  SessionLimits limits;
  std::optional<std::string> disk_kind;  // "disk" | "memory"; unset: the daemon's disk.kind
  std::vector<VolumeMountSpec> volumes;
  std::vector<std::string> env;  // "K=V"
  std::map<std::string, std::string> metadata;
  std::optional<bool> allow_sudo;  // unset: what the template promises
  uint64_t auto_pause_s = 0;       // pause once idle this long; 0 = never (session/pause.cc)
  bool auto_resume = false;        // an exec or file call on a paused session resumes it
  // When the TTL runs out the session is paused instead of ended, and then kept paused
  // for maxima.ttl_s more (a new TTL, e.g. PATCH ttl_s, makes it end at that one again).
  bool pause_at_ttl = false;
  bool use_pool = true;            // `"pool": false` always boots a fresh sandbox
  // "network": mode none (no door) or allowlist (the door, under these rules).
  NetworkPolicy network;
  // The session gets the egress door even with network mode none (then it reaches
  // internal services only, e.g. the package gateway; net/internal_service.h).
  bool egress_door = false;
  // `packages` (API.md): unset leaves the session's package managers as the template
  // has them; set, they go through the package gateway in the mode asked for.
  std::optional<net::PackageRequest> packages;
  std::vector<SecretGrantSpec> secrets;
  std::optional<FilePolicy> files;  // unset: the daemon's defaults
};

enum class ExecUser { user, root };

// POST …/execs and …/run.
struct ExecSpec {
  std::vector<std::string> argv;  // exactly one of argv and cmd
  std::string cmd;                // run by /bin/sh -c
  std::string cwd;                // "" = the user's home
  std::vector<std::string> env;   // "K=V", over the session's
  ExecUser user = ExecUser::user;
  // Unset: the session's exec_timeout_s. More than the session's ceiling is refused
  // (invalid_argument) by the session layer, which knows the ceiling.
  std::optional<uint64_t> timeout_ms;
  // A timeout_ms above the ceiling is lowered to it instead of refused (E2B's
  // Connect-Timeout-Ms is the client's deadline, not a request for more time).
  bool cap_timeout = false;
  std::string stdin_text;
  bool stdin_open = false;  // keep stdin open after stdin_text (POST …/stdin writes)
  bool tty = false;         // on a pty of cols x rows: output is one stream (stdout)
  uint16_t cols = 80, rows = 24;
  std::string tag;  // the caller's label for it, shown by live_execs (E2B's process tag)
};

// An exec that has not ended, as SessionManager::live_execs shows it.
struct LiveExec {
  store::ExecRecord record;      // with live byte counts; pid inside the sandbox
  std::vector<std::string> env;  // the exec's own "K=V" (not the session's), redacted
  std::string tag;
  bool tty = false;
  // Kept-byte offsets now: follow_exec from here streams only what comes next.
  uint64_t stdout_kept = 0, stderr_kept = 0;
};

struct KillSpec {
  int signal = 15;  // SIGTERM
  std::chrono::milliseconds grace{2000};
};

struct PatchSpec {
  std::optional<uint64_t> ttl_s;
  // "network": {"allow", "deny"}: the rules of new connections (mode stays).
  std::optional<std::vector<std::string>> network_allow, network_deny;
};

// An exec's kept output, whole (GET …/output and /run answers).
struct ExecOutput {
  std::string stdout_data, stderr_data;
  bool truncated = false;
};

// A finished /run: the record, and its output when it was small enough to keep in
// memory (else read it with exec_output()).
struct RunOutcome {
  store::ExecRecord record;
  std::optional<ExecOutput> output;
};

// One process of a session as the sandbox sees it (GET …/processes).
struct ProcessRecord {
  int64_t pid = 0, ppid = 0;  // inside the sandbox's pid namespace (init is 1, its ppid 0)
  std::string user;           // "root", the template user's name, or the uid inside
  std::string cmd;            // the command line, arguments joined by spaces (redacted)
  std::optional<std::string> exec_id;  // the exec whose cgroup holds it; none for init and strays
};

// A connection into 127.0.0.1:port of a session (the port proxy): a TCP socket of the
// session's network namespace, not yet connected, and the session's count of open
// proxied connections, held until `lease` is dropped (any thread).
struct PortSocket {
  UniqueFd socket;
  std::shared_ptr<void> lease;
};

// Completions of asynchronous calls. They run on the session reactor: they must not
// block (hand the answer to the HTTP layer and return).
template <class T>
using Done = std::function<void(Result<T>)>;

}  // namespace cela::session
