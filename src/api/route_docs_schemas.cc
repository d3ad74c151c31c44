// The schema helpers of route_docs.h and the shared component schemas: the shapes of
// what cela answers, each written next to the name of the code that renders it.
#include <boost/json.hpp>

#include "api/e2b/control_docs.h"
#include "api/route_docs.h"

namespace cela::api {
namespace json = boost::json;

namespace docs {
namespace {

json::object typed(std::string_view type, std::string description) {
  json::object o{{"type", type}};
  if (!description.empty()) o["description"] = std::move(description);
  return o;
}

}  // namespace

json::value ref(std::string_view component) {
  return json::object{{"$ref", "#/components/schemas/" + std::string(component)}};
}

json::value string_schema(std::string description) {
  return typed("string", std::move(description));
}
json::value integer_schema(std::string description) {
  json::object o = typed("integer", std::move(description));
  o["format"] = "int64";
  return o;
}
json::value number_schema(std::string description) {
  return typed("number", std::move(description));
}
json::value boolean_schema(std::string description) {
  return typed("boolean", std::move(description));
}

json::value enum_schema(std::initializer_list<std::string_view> values, std::string description) {
  json::object o = typed("string", std::move(description));
  json::array a;
  for (std::string_view v : values) a.emplace_back(v);
  o["enum"] = std::move(a);
  return o;
}

json::value array_of(json::value items, std::string description) {
  json::object o = typed("array", std::move(description));
  o["items"] = std::move(items);
  return o;
}

json::value string_map(std::string description) {
  json::object o = typed("object", std::move(description));
  o["additionalProperties"] = json::object{{"type", "string"}};
  return o;
}

json::value nullable(json::value schema) {
  json::object& o = schema.as_object();
  // A $ref ignores its siblings in OpenAPI 3.0: wrap it.
  if (o.contains("$ref")) return json::object{{"allOf", json::array{schema}}, {"nullable", true}};
  o["nullable"] = true;
  return schema;
}

json::value object_schema(
    std::initializer_list<std::pair<std::string_view, json::value>> properties,
    std::initializer_list<std::string_view> required, std::string description, bool closed) {
  json::object o = typed("object", std::move(description));
  json::object props;
  for (const auto& [name, schema] : properties) props[name] = schema;
  o["properties"] = std::move(props);
  if (required.size() > 0) {
    json::array r;
    for (std::string_view name : required) r.emplace_back(name);
    o["required"] = std::move(r);
  }
  o["additionalProperties"] = !closed;
  return o;
}

namespace {
// The sibling of a file name field, present only when the name is not UTF-8.
json::value name_b64() {
  return string_schema("padded base64 of the exact bytes; present only when they are not UTF-8");
}
}  // namespace

json::value bounded(json::value schema, double minimum, double maximum) {
  json::object& o = schema.as_object();
  bool integer = o.at("type").as_string() == "integer";
  o["minimum"] = integer ? json::value(static_cast<std::int64_t>(minimum)) : json::value(minimum);
  o["maximum"] = integer ? json::value(static_cast<std::int64_t>(maximum)) : json::value(maximum);
  return schema;
}

ParamDoc path_param(std::string name, std::string description) {
  return ParamDoc{std::move(name), "path", string_schema(), std::move(description), true};
}

ParamDoc query_param(std::string name, json::value schema, std::string description, bool required) {
  return ParamDoc{std::move(name), "query", std::move(schema), std::move(description), required};
}

ParamDoc query_flag(std::string name, std::string description) {
  return ParamDoc{std::move(name), "query",
                  enum_schema({"1", "0", "true", "false", "yes", "no", ""},
                              "1/true/yes or 0/false/no; present without a value means true"),
                  std::move(description), false};
}

RequestBodyDoc json_body(json::value schema, bool required, std::string description) {
  return RequestBodyDoc{
      std::move(description), {ContentDoc{"application/json", std::move(schema)}}, required};
}

RequestBodyDoc raw_body(std::string media_type, std::string description) {
  return RequestBodyDoc{
      std::move(description),
      {ContentDoc{std::move(media_type), json::object{{"type", "string"}, {"format", "binary"}}}},
      false};
}

ResponseDoc json_response(int status, std::string description, json::value schema) {
  return ResponseDoc{
      status, std::move(description), {ContentDoc{"application/json", std::move(schema)}}, {}};
}

ResponseDoc empty_response(int status, std::string description) {
  return ResponseDoc{status, std::move(description), {}, {}};
}

}  // namespace docs

namespace {
using namespace docs;

json::value timestamp(std::string description = "RFC 3339 UTC with milliseconds") {
  json::object o = string_schema(std::move(description)).as_object();
  o["format"] = "date-time";
  return o;
}

// http_error.cc error_body.
json::value error_schema() {
  return object_schema(
      {{"error", object_schema(
                     {{"code", string_schema(
                                   "stable machine code: invalid_request, unauthorized, forbidden, "
                                   "policy_denied, not_found, method_not_allowed, request_timeout, "
                                   "conflict, gone, payload_too_large, unsupported_media_type, "
                                   "quota_exceeded, rate_limited, internal, capacity_exceeded")},
                      {"category", enum_schema({"user", "policy", "quota", "platform"})},
                      {"message", string_schema("one human line")},
                      {"session_id", nullable(string_schema())},
                      {"exec_id", nullable(string_schema())},
                      {"request_id", string_schema("also in the daemon's log")},
                      {"retryable", boolean_schema()},
                      {"retry_after_s", nullable(integer_schema("also sent as Retry-After"))}},
                     {"code", "category", "message", "session_id", "exec_id", "request_id",
                      "retryable", "retry_after_s"})}},
      {"error"}, "every non-2xx answer (API.md \"Errors\")");
}

// api/session_specs.cc parse_create_session: the accepted limits (all optional on create; the
// session object carries every one of them).
json::value limits_schema(bool all_required) {
  auto make = [&](std::initializer_list<std::string_view> required) {
    return object_schema({{"cpus", number_schema("CPUs (fractions allowed), > 0")},
                          {"memory_mb", integer_schema("at least 16")},
                          {"disk_mb", integer_schema("size of the writable layer")},
                          {"pids", integer_schema()},
                          {"ttl_s", integer_schema("the session ends this long after it starts")},
                          {"idle_timeout_s", integer_schema("no exec running and no API activity")},
                          {"exec_timeout_s", integer_schema("default timeout_s of an exec")}},
                         required, "defaults and maxima come from the daemon's config");
  };
  if (all_required)
    return make(
        {"cpus", "memory_mb", "disk_mb", "pids", "ttl_s", "idle_timeout_s", "exec_timeout_s"});
  return make({});
}

// api/render.cc render(SessionRecord).
json::value session_schema() {
  return object_schema(
      {{"id", string_schema("s-<16 hex>")},
       {"state", enum_schema({"starting", "ready", "running", "paused", "terminated", "failed"})},
       {"template", string_schema("name@version")},
       {"limits", ref("Limits")},
       {"network", ref("Network")},
       {"created_at", timestamp()},
       {"ready_at", nullable(timestamp())},
       {"expires_at", nullable(timestamp())},
       {"metadata", string_map()},
       {"termination", nullable(ref("Termination"))},
       {"startup_ms", nullable(integer_schema("wall time of the create (of the last reset, after one; a pool claim's is 0-1)"))},
       {"disk", object_schema({{"kind", enum_schema({"disk", "memory"})}}, {"kind"},
                              "the writable layer: an ext4 image of its own (disk) or a tmpfs (memory)")},
       {"disk_used_bytes", nullable(integer_schema("bytes in use in the writable layer beyond an empty one"))},
       {"disk_written_bytes",
        nullable(integer_schema("bytes written to the writable layer's image since create (or the last reset); "
                                "null for a memory layer (tmpfs keeps no such counter)"))},
       {"volumes", array_of(ref("VolumeMount"))},
       {"resets", integer_schema("POST .../reset calls so far (while the session is live)")},
       {"auto_pause_s", integer_schema("idle seconds before the session pauses itself; 0 = never")},
       {"auto_resume", boolean_schema("exec and file calls resume a paused session")},
       {"cleanup", ref("Cleanup")}},
      {"id", "state", "template", "limits", "network", "created_at", "ready_at", "expires_at",
       "metadata", "termination", "startup_ms", "auto_pause_s", "auto_resume"},
      "a session; `cleanup` once it has been cleaned up");
}

// api/render.cc render(ExecRecord): `argv` or `cmd`, never both.
json::value exec_schema() {
  return object_schema(
      {{"id", string_schema("e-<16 hex>")},
       {"session_id", string_schema()},
       {"argv", array_of(string_schema(), "when started with argv")},
       {"cmd", string_schema("when started with cmd")},
       {"cwd", string_schema()},
       {"user", enum_schema({"user", "root"})},
       {"state", enum_schema({"running", "exited", "killed", "timed_out", "oom_killed", "failed"})},
       {"pid", nullable(integer_schema("the exec's main process as seen inside the sandbox; null until it started"))},
       {"exit_code", nullable(integer_schema())},
       {"signal", nullable(integer_schema("the signal that ended the main process"))},
       {"reason",
        nullable(string_schema("one line, e.g. \"memory limit 512 MiB reached; killed by OOM\""))},
       {"started_at", timestamp()},
       {"ended_at", nullable(timestamp())},
       {"duration_ms", nullable(integer_schema())},
       {"cpu_ms", nullable(integer_schema())},
       {"peak_memory_bytes", nullable(integer_schema())},
       {"pids_peak", nullable(integer_schema("most processes alive at once; null where the host does not count it"))},
       {"stdout_bytes", integer_schema()},
       {"stderr_bytes", integer_schema()},
       {"output_truncated", boolean_schema("past the per-stream cap")},
       {"partial", boolean_schema("produced output, then failed")}},
      {"id", "session_id", "cwd", "user", "state", "pid", "exit_code", "signal", "reason", "started_at",
       "ended_at", "duration_ms", "cpu_ms", "peak_memory_bytes", "pids_peak", "stdout_bytes", "stderr_bytes",
       "output_truncated", "partial"},
      "an exec record");
}

// routes_sessions.cc run: the record plus its output (both base64 when either is not
// UTF-8). Spelled out rather than allOf: Exec is closed.
json::value exec_result_schema() {
  json::value v = exec_schema();
  json::object& o = v.as_object();
  o["description"] = "a finished exec record with its output";
  json::object& props = o["properties"].as_object();
  props["stdout"] = string_schema();
  props["stderr"] = string_schema();
  props["encoding"] = enum_schema({"base64"}, "present when either stream is not UTF-8");
  o["required"].as_array().emplace_back("stdout");
  o["required"].as_array().emplace_back("stderr");
  return v;
}

// api/session_specs.cc parse_exec.
json::value exec_request_schema() {
  json::object o =
      object_schema(
          {{"argv", array_of(string_schema(),
                             "the program and its arguments (exactly one of argv and cmd)")},
           {"cmd", string_schema("a shell line run by /bin/sh -c (exactly one of argv and cmd)")},
           {"cwd", string_schema("absolute path inside the sandbox")},
           {"env", string_map("added to the session's environment")},
           {"timeout_s",
            number_schema("> 0, fractions allowed; default: the session's exec_timeout_s")},
           {"stdin", nullable(string_schema("written to stdin first"))},
           {"stdin_open", boolean_schema("keep stdin open after `stdin` (write with .../stdin)")},
           {"user", enum_schema({"user", "root"}, "default user")},
           {"tty", boolean_schema("run on a pty of the session's own devpts (a new session with the pty "
                                  "as controlling terminal, TERM=xterm-256color unless `env` sets TERM); "
                                  "output is one stream (stdout), stdin goes to the terminal")},
           {"cols", bounded(integer_schema("with tty: terminal columns, default 80"), 1, 1000)},
           {"rows", bounded(integer_schema("with tty: terminal rows, default 24"), 1, 1000)}})
          .as_object();
  o["oneOf"] = json::array{json::object{{"required", json::array{"argv"}}},
                           json::object{{"required", json::array{"cmd"}}}};
  return o;
}

}  // namespace

const json::object& component_schemas() {
  static const json::object schemas = [] {
    json::object s;
    s["Error"] = error_schema();
    for (auto& kv : e2b::docs::schemas()) s[kv.key()] = kv.value();  // E2B's (api/e2b/control_docs.h)
    s["Health"] = object_schema({{"status", enum_schema({"ok"})}}, {"status"});
    s["Readiness"] = object_schema({{"status", enum_schema({"ready", "full"})},
                                    {"live_sessions", integer_schema()},
                                    {"max_sessions", integer_schema()}},
                                   {"status", "live_sessions", "max_sessions"});
    s["OpenApiDocument"] =
        object_schema({}, {"openapi", "info", "paths"}, "an OpenAPI 3.0 document", false);

    s["Limits"] = limits_schema(true);
    s["LimitsRequest"] = limits_schema(false);
    s["Network"] = object_schema(
        {{"mode", enum_schema({"none", "allowlist"})},
         {"allow", array_of(string_schema())},
         {"deny", array_of(string_schema())}},
        {"mode"});
    s["NetworkRequest"] = object_schema(
        {{"mode", enum_schema({"none", "allowlist"}, "none (default): no network; allowlist: the egress door")},
         {"allow", array_of(string_schema(), "host, *.domain, *, IP literal or CIDR, optional :port or :*")},
         {"deny", array_of(string_schema(), "same syntax; deny wins")}},
        {}, "egress policy (API.md \"Network (egress)\")");
    // routes_egress.cc, from store::EgressRecord.
    s["EgressConnection"] = object_schema(
        {{"at", timestamp()},
         {"kind", enum_schema({"connect", "http", "socks", "service"})},
         {"host", string_schema()},
         {"ip", nullable(string_schema("the address dialled or refused"))},
         {"port", integer_schema()},
         {"verdict", enum_schema({"allowed", "denied"})},
         {"rule", nullable(string_schema("what decided"))},
         {"reason", nullable(string_schema())},
         {"bytes_up", integer_schema()},
         {"bytes_down", integer_schema()},
         {"duration_ms", integer_schema()}},
        {"at", "kind", "host", "ip", "port", "verdict", "rule", "reason", "bytes_up", "bytes_down", "duration_ms"});
    s["NetworkCeiling"] = object_schema(
        {{"allow", array_of(string_schema(), "rules a session's allow rules must fit inside")},
         {"deny", array_of(string_schema(), "denied for every session of the tenant")}});
    s["NetworkCeilingAnswer"] = object_schema({{"network_ceiling", nullable(ref("NetworkCeiling"))}},
                                              {"network_ceiling"});
    s["EgressList"] = object_schema(
        {{"connections", array_of(ref("EgressConnection"), "oldest first")},
         {"next_cursor", nullable(string_schema("pass as ?cursor= for the next page"))}},
        {"connections", "next_cursor"});
    s["Termination"] = object_schema(
        {{"reason", string_schema("deleted, ttl_expired, idle_timeout, init_died, daemon_restart, "
                                  "daemon_shutdown, start_failed, ...")},
         {"at", nullable(timestamp())},
         {"message", string_schema()}},
        {"reason", "at"});
    // session/manager.cc terminate, rendered by routes_sessions.cc: {} until a live session has been cleaned up.
    s["Cleanup"] = object_schema({{"processes_killed", integer_schema()},
                                  {"cgroup_removed", boolean_schema()},
                                  {"mounts_removed", boolean_schema()},
                                  {"upper_dir_freed", boolean_schema()},
                                  {"secrets_wiped", integer_schema()},
                                  {"loop_detached",
                                   boolean_schema("disk layer: its loop device is no longer bound to its image (the "
                                                  "image, never linked, is gone with it)")},
                                  {"disk_used_bytes", integer_schema("the writable layer's last reading")},
                                  {"disk_written_bytes", integer_schema("the writable layer's last reading")},
                                  {"volumes_released", integer_schema("volumes the session no longer holds")},
                                  {"error", string_schema("what could not be cleaned up")}});
    s["VolumeMount"] = object_schema({{"name", string_schema("a volume of the caller's tenant")},
                                      {"path", string_schema("absolute path inside; not /, /proc, /dev, /sys")},
                                      {"read_only", boolean_schema("default false; one writer at a time")}},
                                     {"name", "path"});
    s["Volume"] = object_schema({{"name", string_schema()},
                                 {"size_mb", integer_schema("the cap: writes past it fail with ENOSPC")},
                                 {"created_at", timestamp()},
                                 {"allocated_bytes", integer_schema("host disk the (sparse) image takes now")},
                                 {"writer", nullable(string_schema("the session mounting it read-write"))},
                                 {"readers", array_of(string_schema(), "sessions mounting it read-only")}},
                                {"name", "size_mb", "created_at", "allocated_bytes", "writer", "readers"});
    s["VolumeList"] = object_schema({{"volumes", array_of(ref("Volume"), "by name")}}, {"volumes"});
    s["CreateVolume"] = object_schema({{"name", string_schema("1-63 of a-z 0-9 . _ -, starting with a letter or digit")},
                                       {"size_mb", integer_schema("16 up to the server's volumes.max_size_mb")}},
                                      {"name", "size_mb"});
    s["Session"] = session_schema();
    s["DeletedSession"] = json::object{
        {"allOf", json::array{ref("Session"), object_schema({{"cleanup", ref("Cleanup")}},
                                                            {"cleanup"}, {}, false)}}};
    s["SessionList"] = object_schema(
        {{"sessions", array_of(ref("Session"), "newest first")},
         {"next_cursor", nullable(string_schema("pass as ?cursor= for the next page"))}},
        {"sessions", "next_cursor"});
    s["PackagesRequest"] = object_schema(
        {{"mode", enum_schema({"off", "offline", "gateway"})},
         {"registries", array_of(enum_schema({"pypi", "npm", "debian"}), "within the tenant's")},
         {"allow", array_of(string_schema("pypi:requests==2.*, npm:lodash@^4, debian:curl"))},
         {"deny", array_of(string_schema("wins over allow and lock"))},
         {"lock", string_map("pypi:NAME==V, npm:NAME@V, debian:NAME=V -> sha256:<hex>")},
         {"min_age_days", integer_schema()},
         {"max_download_mb", integer_schema()}},
        {}, "the package gateway; mode off (the default) refuses every install with a message");
    s["PackageInstall"] = object_schema(
        {{"at", timestamp()},
         {"manager", enum_schema({"pypi", "npm", "debian"})},
         {"name", string_schema()},
         {"version", nullable(string_schema("null for a refusal by name"))},
         {"registry", string_schema("the upstream's origin")},
         {"sha256", nullable(string_schema())},
         {"size", integer_schema()},
         {"verdict", enum_schema({"allowed", "denied", "failed"})},
         {"rule", string_schema("what decided: allow …, deny …, lock …, min_age_days N, …")},
         {"reason", nullable(string_schema())},
         {"cache", enum_schema({"hit", "miss"})}},
        {"at", "manager", "name", "version", "registry", "sha256", "size", "verdict", "rule", "reason", "cache"});
    s["PackageInstallList"] = object_schema(
        {{"installs", array_of(ref("PackageInstall"), "oldest first")},
         {"next_cursor", nullable(string_schema("pass as ?cursor= for the next page"))}},
        {"installs", "next_cursor"});
    s["CreateSession"] = object_schema(
        {{"template", string_schema("template name; default from the config")},
         {"limits", ref("LimitsRequest")},
         {"env", string_map()},
         {"metadata", string_map("filterable with ?metadata.K=V")},
         {"network", ref("NetworkRequest")},
         {"packages", ref("PackagesRequest")},
         {"secrets",
          array_of(object_schema({{"name", string_schema("a tenant secret (PUT /v1/secrets/{name})")},
                                  {"as", enum_schema({"env", "file"}, "default env")},
                                  {"env", string_schema("env mode: the variable; default the name")},
                                  {"path", string_schema("file mode: /run/secrets/<file>; default /run/secrets/NAME")},
                                  {"ttl_s", integer_schema("the grant ends after this; default the session's life")}},
                                 {"name"}),
                   "secret grants; an unknown name is not_found")},
         {"files",
          object_schema({{"writable", array_of(string_schema("DIR/**"), "upload paths")},
                         {"exportable", array_of(string_schema("DIR/**"), "download and archive paths")},
                         {"max_upload_mb", integer_schema()},
                         {"max_export_mb", integer_schema()},
                         {"scan_secrets", enum_schema({"refuse", "redact", "off"})}},
                        {}, "file policy; narrows the tenant defaults (widening is policy_denied)")},
         {"volumes", array_of(ref("VolumeMount"), "volumes of the tenant to mount (at most 8)")},
         {"disk", object_schema({{"kind", enum_schema({"disk", "memory"})}}, {},
                                "the writable layer; default: the server's disk.kind")},
         {"pool", boolean_schema("default true: a create that matches a configured warm pool's shape "
                                 "claims one of its ready sessions; false always boots a fresh one")},
         {"auto_pause_s", integer_schema("pause the session after this many idle seconds (no exec "
                                         "running, no call); 0 or absent: never")},
         {"auto_resume", boolean_schema("an exec, stdin, kill or file call on a paused session "
                                        "resumes it first (default false: 409 conflict)")}},
        {}, "every field optional");
    s["PoolList"] = object_schema(
        {{"pools",
          array_of(object_schema(
              {{"template", string_schema()},
               {"size", integer_schema("sessions kept ready")},
               {"limits", object_schema({{"cpus", number_schema()},
                                         {"memory_mb", integer_schema()},
                                         {"disk_mb", integer_schema()},
                                         {"pids", integer_schema()}},
                                        {"cpus", "memory_mb", "disk_mb", "pids"}, "the shape a create must ask for")},
               {"ready", integer_schema("booted, never used, waiting for a claim")},
               {"booting", integer_schema("refills in progress")},
               {"hits", integer_schema("creates served from the pool")},
               {"misses", integer_schema("creates of the pool's shape that found it empty")},
               {"refill_ms_last", nullable(number_schema("boot time of the last pooled session"))},
               {"refill_ms_p50", nullable(number_schema("median over the last 256 boots"))},
               {"claim_ms_p50", nullable(number_schema("median claim time inside the daemon, last 256"))},
               {"last_error", nullable(string_schema("why the last refill failed"))}},
              {"template", "size", "limits", "ready", "booting", "hits", "misses", "refill_ms_last", "refill_ms_p50",
               "claim_ms_p50", "last_error"}))}},
        {"pools"});
    s["PatchSession"] = object_schema(
        {{"ttl_s", number_schema("the session lives this many more seconds")},
         {"network", object_schema({{"allow", array_of(string_schema())}, {"deny", array_of(string_schema())}}, {},
                                   "the egress rules of new connections (a session created with mode allowlist)")}});

    s["ExecRequest"] = exec_request_schema();
    s["ExecStarted"] = object_schema(
        {{"id", string_schema()}, {"state", enum_schema({"running", "failed"})}}, {"id", "state"});
    s["Exec"] = exec_schema();
    s["ExecResult"] = exec_result_schema();
    s["ExecOutput"] = object_schema(
        {{"stdout", string_schema()},
         {"stderr", string_schema()},
         {"encoding", enum_schema({"base64"}, "present when either stream is not UTF-8")},
         {"output_truncated", boolean_schema()}},
        {"stdout", "stderr", "output_truncated"});
    s["ResizeRequest"] = object_schema({{"cols", bounded(integer_schema("terminal columns"), 1, 1000)},
                                        {"rows", bounded(integer_schema("terminal rows"), 1, 1000)}},
                                       {"cols", "rows"});
    s["KillRequest"] = object_schema(
        {{"signal",
          enum_schema({"SIGTERM", "SIGKILL", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"},
                      "default SIGTERM")},
         {"grace_s", bounded(number_schema("then SIGKILL to the whole tree; default 2"), 0, 300)}});
    // routes_sessions.cc kill: the signal sent, or the record of an exec that had ended.
    s["KillAccepted"] = json::object{
        {"anyOf", json::array{object_schema({{"id", string_schema()},
                                             {"state", enum_schema({"running"})},
                                             {"signal", integer_schema("the signal number sent")}},
                                            {"id", "state", "signal"}),
                              ref("Exec")}}};

    // routes_files.cc set_name_field: a name that is not UTF-8 comes as display text
    // (U+FFFD for each bad byte) plus its exact bytes in the `_b64` sibling.
    s["FileWritten"] =
        object_schema({{"path", string_schema()},
                       {"path_b64", name_b64()},
                       {"size", integer_schema()},
                       {"sha256", string_schema("lower-case hex of the bytes written")}},
                      {"path", "size", "sha256"});
    // routes_files.cc info_json.
    s["FileInfo"] =
        object_schema({{"name", string_schema()},
                       {"name_b64", name_b64()},
                       {"path", string_schema()},
                       {"path_b64", name_b64()},
                       {"type", enum_schema({"file", "dir", "symlink", "other"})},
                       {"size", integer_schema()},
                       {"mode", integer_schema("permission bits (07777) as a number")},
                       {"mtime", integer_schema("milliseconds since the epoch")},
                       {"symlink_target", nullable(string_schema())},
                       {"symlink_target_b64", name_b64()}},
                      {"name", "path", "type", "size", "mode", "mtime", "symlink_target"});
    s["DirListing"] = object_schema(
        {{"path", string_schema()}, {"path_b64", name_b64()}, {"entries", array_of(ref("FileInfo"))}},
        {"path", "entries"});
    s["MkdirRequest"] = object_schema({{"path", string_schema("required unless path_b64")},
                                       {"path_b64", string_schema("padded base64 of the path's bytes")},
                                       {"parents", boolean_schema()}});
    s["PathResult"] = object_schema({{"path", string_schema()}, {"path_b64", name_b64()}}, {"path"});
    s["MoveRequest"] = object_schema({{"from", string_schema("required unless from_b64")},
                                      {"from_b64", string_schema("padded base64 of the path's bytes")},
                                      {"to", string_schema("required unless to_b64")},
                                      {"to_b64", string_schema("padded base64 of the path's bytes")},
                                      {"overwrite", boolean_schema()}});
    s["MoveResult"] = object_schema({{"from", string_schema()},
                                     {"from_b64", name_b64()},
                                     {"to", string_schema()},
                                     {"to_b64", name_b64()}},
                                    {"from", "to"});
    s["ArchiveImported"] = object_schema({{"path", string_schema()},
                                          {"path_b64", name_b64()},
                                          {"entries", integer_schema("entries extracted")}},
                                         {"path", "entries"});

    s["Quotas"] = object_schema({{"max_sessions", integer_schema("0 = unlimited")},
                                 {"max_memory_mb", integer_schema("0 = unlimited")},
                                 {"max_cpus", number_schema("0 = unlimited")}});
    s["CreateTenant"] =
        object_schema({{"name", string_schema()}, {"quotas", ref("Quotas")}}, {"name"});
    // api/render.cc render(TenantRecord).
    s["Tenant"] = object_schema({{"id", string_schema("t-<16 hex>")},
                                 {"name", string_schema()},
                                 {"quotas", ref("Quotas")},
                                 {"created_at", timestamp()}},
                                {"id", "name", "quotas", "created_at"});
    s["TenantList"] = object_schema({{"tenants", array_of(ref("Tenant"))}}, {"tenants"});
    s["CreateKey"] = object_schema(
        {{"admin", boolean_schema("default false: manages its own tenant")},
         {"host_admin", boolean_schema("default false: acts across tenants; implies admin; only a "
                                       "host admin key may ask for it")},
         {"e2b", boolean_schema("default false: spell the key as E2B's SDKs expect, e2b_<64 hex> "
                                "(docs/e2b.md); otherwise the same key")}});
    s["Key"] = object_schema(
        {{"id", string_schema("k-<16 hex>, safe to show and log")},
         {"tenant_id", string_schema()},
         {"key", string_schema("cela_<64 hex> (e2b_<64 hex> with `e2b`): shown once, only its sha256 is stored")},
         {"admin", boolean_schema()},
         {"host_admin", boolean_schema()}},
        {"id", "tenant_id", "key", "admin", "host_admin"});
    return s;
  }();
  return schemas;
}

}  // namespace cela::api
