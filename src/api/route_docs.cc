// One RouteDoc per v1 route (API.md): what each handler reads (path and query
// parameters, body) and answers (success schemas, the error codes it can choose).
// The handlers live in routes_*.cc; keep a doc next to the truth of its handler.
#include "api/route_docs.h"

#include <boost/json.hpp>

namespace cela::api::docs {
namespace json = boost::json;

namespace {

ParamDoc session_id() {
  return path_param("id", "session id (s-...)");
}
ParamDoc exec_id() {
  return path_param("eid", "exec id (e-...)");
}
// `path`, or `path_b64` for a name that is not UTF-8: one of the two is required
// (routes_files.cc path_param), which OpenAPI cannot say of two query parameters.
ParamDoc file_path(std::string description) {
  return query_param("path", string_schema("absolute path inside the session's root"),
                     std::move(description) + "; required unless `path_b64` is given");
}
ParamDoc file_path_b64() {
  return query_param("path_b64", string_schema("padded base64 of the path's bytes"),
                     "the path as exact bytes, for a name that is not UTF-8 (as answers give it in "
                     "`path_b64`); instead of `path`");
}

json::value binary() {
  return json::object{{"type", "string"}, {"format", "binary"}};
}

}  // namespace

// ---- health, OpenAPI, tenants and keys (routes_admin.cc) ----

const RouteDoc healthz{
    .operation_id = "healthz",
    .tag = "health",
    .summary = "Liveness",
    .description = "Public: no key needed.",
    .responses = {json_response(200, "the daemon answers", ref("Health"))},
};

const RouteDoc readyz{
    .operation_id = "readyz",
    .tag = "health",
    .summary = "Readiness and capacity",
    .description = "Public: no key needed. 503 (status `full`, with Retry-After) while no create could be "
                   "admitted, so a load balancer sends new sessions elsewhere.",
    .responses = {json_response(
        200, "ready, with the number of live sessions and the host-wide limit", ref("Readiness"))},
};

const RouteDoc openapi{
    .operation_id = "getOpenApi",
    .tag = "health",
    .summary = "This document",
    .description = "Public. Generated from the daemon's route table.",
    .responses = {json_response(200, "the OpenAPI 3.0 description of every route",
                                ref("OpenApiDocument"))},
};

const RouteDoc create_tenant{
    .operation_id = "createTenant",
    .tag = "admin",
    .summary = "Create a tenant with quotas (host admin key)",
    .description = "Quotas not given take the config's defaults; 0 means unlimited. A tenant's own "
                   "admin key is forbidden here: only a host admin key (or local root) creates tenants.",
    .body = {json_body(ref("CreateTenant"), true)},
    .responses = {json_response(201, "the tenant", ref("Tenant"))},
    .errors = {"forbidden"},
};

const RouteDoc create_key{
    .operation_id = "createKey",
    .tag = "admin",
    .summary = "Issue an API key for a tenant (admin key); the key is shown once",
    .description = "A tenant admin key issues keys for its own tenant only (another tenant is "
                   "not_found); only a host admin key issues keys for any tenant, and only it may "
                   "ask for `host_admin`.",
    .params = {path_param("t", "tenant id (t-...)")},
    .body = {json_body(ref("CreateKey"))},
    .responses = {json_response(201, "the key; only its sha256 is stored", ref("Key"))},
    .errors = {"forbidden", "not_found"},
};

const RouteDoc list_tenants{
    .operation_id = "listTenants",
    .tag = "admin",
    .summary = "List tenants (admin key): every tenant for a host admin, its own for a tenant admin",
    .responses = {json_response(200, "the tenants, oldest first", ref("TenantList"))},
    .errors = {"forbidden"},
};

const RouteDoc get_tenant{
    .operation_id = "getTenant",
    .tag = "admin",
    .summary = "One tenant (admin key); another tenant is not_found to a tenant admin",
    .params = {path_param("t", "tenant id (t-...)")},
    .responses = {json_response(200, "the tenant", ref("Tenant"))},
    .errors = {"forbidden", "not_found"},
};

// ---- sessions (routes_sessions.cc) ----

const RouteDoc create_session{
    .operation_id = "createSession",
    .tag = "sessions",
    .summary = "Create a session; answers once its init is up and can run code",
    .description =
        "`network` allowlists open the egress door (docs/api.md \"Network (egress)\"); packages other than "
        "off answer policy_denied until the package gateway lands. `volumes` mounts tenant volumes, `disk` "
        "picks the writable layer. `secrets` grants tenant secrets (an unknown "
        "name is not_found): env mode for execs started while the grant lives, file mode as /run/secrets/NAME "
        "(0400, the sandbox user's, on a tmpfs of its own); every form of a granted value is redacted. "
        "`files` narrows the tenant's file policy (policy_denied when it would widen it). A dev-only template (`host`) answers "
        "forbidden unless the daemon runs in dev mode and the caller is local root on the unix socket. "
        "capacity_exceeded (503) also when the "
        "memory, pids or open files granted to live sessions plus this one would pass what the host has "
        "times the operator's overcommit ratio (answered at once, whatever wait_s).",
    .params = {query_param("wait_s", bounded(integer_schema(), 0, 300),
                           "wait this long for host capacity, then answer 503 as without it")},
    .body = {json_body(ref("CreateSession"), false, "every field optional")},
    .responses = {json_response(201, "the session, ready", ref("Session"))},
    .errors = {"forbidden", "policy_denied", "quota_exceeded", "capacity_exceeded"},
};

const RouteDoc list_sessions{
    .operation_id = "listSessions",
    .tag = "sessions",
    .summary = "List the tenant's sessions, newest first",
    .params =
        {query_param(
             "state",
             enum_schema({"starting", "ready", "running", "paused", "terminated", "failed"}),
             "only sessions in this state"),
         query_param(
             "metadata.K", string_schema(),
             "any parameter metadata.<key>=<value>: only sessions whose metadata <key> is <value> "
             "(several keys: all must match)"),
         query_param("limit", bounded(integer_schema(), 1, 1000), "page size"),
         query_param("cursor", string_schema(), "next_cursor of the previous page")},
    .responses = {json_response(200, "one page", ref("SessionList"))},
};

const RouteDoc get_session{
    .operation_id = "getSession",
    .tag = "sessions",
    .summary = "Get a session (also after it ended)",
    .params = {session_id()},
    .responses = {json_response(200, "the session", ref("Session"))},
    .errors = {"not_found"},
};

const RouteDoc session_packages{
    .operation_id = "listSessionPackages",
    .tag = "sessions",
    .summary = "The session's package install attempts through the gateway",
    .description = "Every file a package manager asked the gateway for, and every package it refused by name, "
                   "oldest first; also after the session ended.",
    .params = {session_id(),
               query_param("limit", bounded(integer_schema(), 1, 1000), "page size"),
               query_param("cursor", string_schema(), "next_cursor of the previous page")},
    .responses = {json_response(200, "one page", ref("PackageInstallList"))},
    .errors = {"not_found"},
};

const RouteDoc patch_session{
    .operation_id = "patchSession",
    .tag = "sessions",
    .summary = "Change a live session: ttl_s (it lives that many more seconds), network allow/deny",
    .description = "`network` replaces the egress rules of a session created with mode allowlist, for new "
                   "connections (open tunnels keep running); rules beyond the tenant's ceiling are policy_denied, "
                   "a session without network is conflict.",
    .params = {session_id()},
    .body = {json_body(ref("PatchSession"), true)},
    .responses = {json_response(200, "the session", ref("Session"))},
    .errors = {"not_found", "gone", "policy_denied", "conflict", "invalid_request"},
};

const RouteDoc session_egress{
    .operation_id = "listSessionEgress",
    .tag = "sessions",
    .summary = "Every connection attempt through the session's egress door, oldest first",
    .description = "One entry per CONNECT, SOCKS5 connection, plain-HTTP request or internal-service request: "
                   "host, the address dialled (or refused), port, verdict, the rule that decided, bytes each way.",
    .params = {session_id(), query_param("limit", bounded(integer_schema(), 1, 1000), "page size (default 100)"),
               query_param("cursor", string_schema(), "next_cursor of the previous page")},
    .responses = {json_response(200, "the attempts", ref("EgressList"))},
    .errors = {"not_found", "invalid_request"},
};

const RouteDoc get_network_ceiling{
    .operation_id = "getNetworkCeiling",
    .tag = "tenants",
    .summary = "A tenant's network ceiling (null: none); its admins and host admins",
    .params = {path_param("t", "tenant id")},
    .responses = {json_response(200, "the ceiling", ref("NetworkCeilingAnswer"))},
    .errors = {"forbidden", "not_found"},
};

const RouteDoc set_network_ceiling{
    .operation_id = "setNetworkCeiling",
    .tag = "tenants",
    .summary = "Set a tenant's network ceiling (host admin only)",
    .description = "Its sessions' allow rules must fit inside it (beyond it: policy_denied at create and PATCH); "
                   "both must allow every connection, and a change applies to live sessions' new connections at once.",
    .params = {path_param("t", "tenant id")},
    .body = {json_body(ref("NetworkCeiling"), true)},
    .responses = {json_response(200, "the ceiling", ref("NetworkCeilingAnswer"))},
    .errors = {"forbidden", "not_found", "invalid_request"},
};

const RouteDoc delete_network_ceiling{
    .operation_id = "deleteNetworkCeiling",
    .tag = "tenants",
    .summary = "Remove a tenant's network ceiling (host admin only)",
    .params = {path_param("t", "tenant id")},
    .responses = {json_response(200, "no ceiling", ref("NetworkCeilingAnswer"))},
    .errors = {"forbidden", "not_found"},
};

const RouteDoc delete_session{
    .operation_id = "deleteSession",
    .tag = "sessions",
    .summary = "Terminate a session; idempotent",
    .description = "A second DELETE answers the same final record.",
    .params = {session_id()},
    .responses = {json_response(200, "the final record with the cleanup report",
                                ref("DeletedSession"))},
    .errors = {"not_found"},
};

const RouteDoc pause_session{
    .operation_id = "pauseSession",
    .tag = "sessions",
    .summary = "Freeze every process of the session; idempotent",
    .description = "Answers once the kernel reports the session frozen (state `paused`): it uses no CPU and "
                   "keeps its memory, files and processes. The TTL keeps running; the idle clock and exec "
                   "timeouts stop. While paused, exec, stdin, kill and file calls answer 409 `conflict`, "
                   "unless the session was created with `auto_resume`, which resumes it first.",
    .params = {session_id()},
    .responses = {json_response(200, "the session, state `paused`", ref("Session"))},
    .errors = {"not_found", "gone", "internal"},
};

const RouteDoc resume_session{
    .operation_id = "resumeSession",
    .tag = "sessions",
    .summary = "Thaw a paused session; idempotent",
    .description = "Answers once the kernel reports the session thawed (state `ready`). The idle clock starts "
                   "again from now; exec timeouts go on with what was left of them.",
    .params = {session_id()},
    .responses = {json_response(200, "the session, state `ready`", ref("Session"))},
    .errors = {"not_found", "gone", "internal"},
};

// ---- warm pools (routes_pools.cc) ----

const RouteDoc list_pools{
    .operation_id = "listPools",
    .tag = "admin",
    .summary = "Warm pools from the config: ready sessions, hits, misses, refill and claim times (host admin)",
    .description = "A create whose template and cpus, memory_mb, disk_mb and pids equal a pool's claims one "
                   "of its ready sessions (a hit) unless it says `\"pool\": false`; one that finds the pool "
                   "empty boots cold (a miss). Pooled sessions hold host capacity like live ones.",
    .responses = {json_response(200, "the pools, in config order", ref("PoolList"))},
    .errors = {"forbidden"},
};

// ---- execs (routes_sessions.cc) ----

const RouteDoc start_exec{
    .operation_id = "startExec",
    .tag = "execs",
    .summary = "Start an exec; answers once init has started it",
    .params = {session_id()},
    .body = {json_body(ref("ExecRequest"), true)},
    .responses = {json_response(202, "running, or failed when init could not start it",
                                ref("ExecStarted"))},
    .errors = {"not_found", "gone"},
};

const RouteDoc run_exec{
    .operation_id = "runExec",
    .tag = "execs",
    .summary = "Run an exec to its end; answers the record with its output",
    .description =
        "stdout and stderr are UTF-8 text, or both base64 with \"encoding\": \"base64\".",
    .params = {session_id()},
    .body = {json_body(ref("ExecRequest"), true)},
    .responses = {json_response(200, "the finished record and its output", ref("ExecResult"))},
    .errors = {"not_found", "gone"},
};

const RouteDoc get_exec{
    .operation_id = "getExec",
    .tag = "execs",
    .summary = "Get an exec record",
    .params = {session_id(), exec_id()},
    .responses = {json_response(200, "the exec", ref("Exec"))},
    .errors = {"not_found"},
};

const RouteDoc exec_output{
    .operation_id = "getExecOutput",
    .tag = "execs",
    .summary = "Output after the end, or live as server-sent events with ?follow=1",
    .description =
        "With follow: events `stdout` and `stderr` (data = base64 of the chunk), then `exit` (data "
        "= "
        "the exec record). Each event's id is \"<stdout offset>,<stderr offset>\"; reconnecting "
        "with "
        "Last-Event-ID replays exactly what came after it. Works after the end too.",
    .params = {session_id(), exec_id(),
               query_flag("follow",
                          "stream as text/event-stream instead of answering the whole output"),
               ParamDoc{"Last-Event-ID", "header", string_schema("<stdout offset>,<stderr offset>"),
                        "with follow: resume after this position"}},
    .responses = {ResponseDoc{
        200,
        "the output (JSON), or with follow the event stream",
        {ContentDoc{"application/json", ref("ExecOutput")},
         ContentDoc{"text/event-stream",
                    string_schema("events stdout, stderr (base64 data) and exit")}},
        {}}},
    .errors = {"not_found", "conflict"},
};

const RouteDoc session_ws{
    .operation_id = "sessionWebSocket",
    .tag = "execs",
    .summary = "Interactive execs over a WebSocket (JSON text messages)",
    .description =
        "A WebSocket upgrade (RFC 6455), authenticated as any request. Client messages: "
        "exec (the body of POST …/execs plus `ref`), stdin (base64 `data`), close_stdin, kill "
        "(`signal`, `grace_s`), resize (`cols`, `rows`), attach (`exec`, `offset` \"<stdout>,<stderr>\"). "
        "Server messages: started, stdout / stderr (base64 `data`, `offset`), exit (`record`), "
        "error (`error` as REST, `ref` / `exec`). Several execs at once; the server pings; a "
        "client that stops reading is disconnected. Binary messages close with 1008, oversize "
        "ones with 1009. See docs/api.md \"WebSocket\".",
    .params = {session_id()},
    .responses = {ResponseDoc{101, "switching protocols: the WebSocket", {}, {}}},
    .errors = {"not_found"},
};

const RouteDoc write_stdin{
    .operation_id = "writeStdin",
    .tag = "execs",
    .summary = "Write the raw body to the exec's stdin (?close=1 closes it after)",
    .params = {session_id(), exec_id(), query_flag("close", "close stdin after writing the body")},
    .body = {raw_body("application/octet-stream", "bytes for stdin (may be empty)")},
    .responses = {empty_response(204, "written")},
    .errors = {"not_found", "gone", "conflict"},
};

const RouteDoc kill_exec{
    .operation_id = "killExec",
    .tag = "execs",
    .summary = "Signal every process of the exec's cgroup, SIGKILL after grace_s",
    .params = {session_id(), exec_id()},
    .body = {json_body(ref("KillRequest"))},
    .responses = {json_response(
        202, "the signal was sent (or the record of an exec that had ended)", ref("KillAccepted"))},
    .errors = {"not_found", "gone"},
};

const RouteDoc resize_exec{
    .operation_id = "resizeExec",
    .tag = "execs",
    .summary = "Set a tty exec's terminal size (its foreground process group gets SIGWINCH)",
    .params = {session_id(), exec_id()},
    .body = {json_body(ref("ResizeRequest"))},
    .responses = {empty_response(204, "resized")},
    .errors = {"not_found", "gone", "conflict"},
};

// ---- files (routes_files.cc) ----

const RouteDoc write_file{
    .operation_id = "writeFile",
    .tag = "files",
    .summary = "Upload a file (the raw body), owned by the sandbox's user",
    .description =
        "The body is streamed into the session and charged to it (its disk and memory "
        "limits apply). A Content-Length over the upload limit or over what the session has "
        "free is answered 413 before the body is read (without 100 Continue when the client "
        "sent Expect: 100-continue). A write that runs out of room is 413 and leaves no file. "
        "policy_denied outside the session's writable paths (`files.writable`); forbidden where the "
        "sandbox user may not write (the directory's permissions, a sticky directory).",
    .params = {session_id(), file_path("the file to write"), file_path_b64(),
               query_param("mode", string_schema("octal, e.g. 0644 (at most 07777)"),
                           "permission bits"),
               query_flag("parents", "create missing parent directories")},
    .body = {raw_body("application/octet-stream", "the file's bytes")},
    .responses = {json_response(201, "written", ref("FileWritten"))},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

const RouteDoc read_file{
    .operation_id = "readFile",
    .tag = "files",
    .summary = "Download a file",
    .description = "Only from the session's exportable paths (`files.exportable`; a final symlink is not "
                   "followed there) and up to `files.max_export_mb` (else policy_denied, 413). A file holding a "
                   "granted secret is refused (policy_denied) or redacted per `files.scan_secrets`. Every "
                   "download is recorded (path, size, sha256).",
    .params = {session_id(), file_path("the file to read"), file_path_b64()},
    .responses = {ResponseDoc{
        200, "the file's bytes", {ContentDoc{"application/octet-stream", binary()}}, {}}},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

const RouteDoc stat_file{
    .operation_id = "statFile",
    .tag = "files",
    .summary = "Size, mtime and type of a path, as headers",
    .params = {session_id(), file_path("the path to look at"), file_path_b64()},
    .responses = {ResponseDoc{
        200,
        "headers only",
        {},
        {HeaderDoc{"X-Cela-Size", "size in bytes", integer_schema()},
         HeaderDoc{"X-Cela-Mtime-Ms", "mtime, milliseconds since the epoch", integer_schema()},
         HeaderDoc{"X-Cela-Type", "file, dir, symlink or other",
                   enum_schema({"file", "dir", "symlink", "other"})}}}},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

const RouteDoc delete_file{
    .operation_id = "deleteFile",
    .tag = "files",
    .summary = "Delete a file or (with ?recursive=1) a directory tree",
    .params = {session_id(), file_path("the path to delete"), file_path_b64(),
               query_flag("recursive", "delete a directory and everything in it")},
    .responses = {empty_response(204, "deleted")},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

const RouteDoc list_dir{
    .operation_id = "listDirectory",
    .tag = "files",
    .summary = "List a directory",
    .params = {session_id(), query_param("path", string_schema(), "the directory; default /"),
               file_path_b64(),
               query_param("depth", bounded(integer_schema(), 1, 64),
                           "levels to descend; default 1")},
    .responses = {json_response(200, "the entries", ref("DirListing"))},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

const RouteDoc make_dir{
    .operation_id = "makeDirectory",
    .tag = "files",
    .summary = "Create a directory",
    .params = {session_id()},
    .body = {json_body(ref("MkdirRequest"), true)},
    .responses = {json_response(201, "created", ref("PathResult"))},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

const RouteDoc move_path{
    .operation_id = "movePath",
    .tag = "files",
    .summary = "Move or rename a path",
    .params = {session_id()},
    .body = {json_body(ref("MoveRequest"), true)},
    .responses = {json_response(200, "moved", ref("MoveResult"))},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

const RouteDoc export_archive{
    .operation_id = "exportArchive",
    .tag = "files",
    .summary = "Export a directory as a tar stream",
    .description =
        "Symlinks are kept as symlinks, special files skipped, size-capped. A tar cut short by an "
        "error ends without its end-of-archive blocks (the chunked answer is aborted).",
    .params = {session_id(), file_path("the directory to export"), file_path_b64()},
    .responses = {ResponseDoc{
        200, "a tar of the directory", {ContentDoc{"application/x-tar", binary()}}, {}}},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

const RouteDoc import_archive{
    .operation_id = "importArchive",
    .tag = "files",
    .summary = "Extract a tar (the raw body) into a directory",
    .description = "Absolute paths, .., device nodes and links that point out are refused. "
                   "The tar is streamed and extracted inside the session's accounting: a "
                   "Content-Length or an entry larger than the session has free is 413.",
    .params = {session_id(), file_path("the directory to extract into"), file_path_b64()},
    .body = {raw_body("application/x-tar", "a tar archive")},
    .responses = {json_response(200, "extracted", ref("ArchiveImported"))},
    .errors = {"not_found", "gone", "forbidden", "policy_denied", "payload_too_large"},
};

}  // namespace cela::api::docs
