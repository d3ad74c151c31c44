// Route docs of metrics, events and the audit log (routes_observe.cc). Their schemas
// are written inline: they follow routes_observe.cc's renderers.
#include "api/route_docs.h"

namespace cela::api::docs {
namespace json = boost::json;

namespace {
json::value limit_event_schema() {
  return object_schema({{"at", string_schema("RFC 3339")},
                        {"kind", enum_schema({"oom", "pids", "disk", "cpu_throttle", "timeout", "ttl", "egress_bandwidth", "egress_connections"})},
                        {"detail", string_schema("what was hit, in words")},
                        {"exec_id", nullable(string_schema())}},
                       {"at", "kind", "detail"});
}

json::value audit_record_schema() {
  return object_schema({{"seq", integer_schema("position in the host's chain")},
                        {"at", string_schema("RFC 3339")},
                        {"tenant_id", string_schema()},
                        {"session_id", nullable(string_schema())},
                        {"exec_id", nullable(string_schema())},
                        {"kind", string_schema("session.create, exec.start, process.exec, limit.oom, ... "
                                               "(docs/security.md \"Audit\")")},
                        {"data", json::object{{"type", "object"}, {"description", "the kind's fields"}}},
                        {"prev_hash", string_schema("sha256 hex of the record before it")},
                        {"hash", string_schema("sha256 hex of this record and prev_hash")}},
                       {"seq", "at", "tenant_id", "kind", "data", "prev_hash", "hash"});
}

ParamDoc session_param() { return path_param("id", "session id"); }
}  // namespace

const RouteDoc prometheus_metrics{
    .operation_id = "getPrometheusMetrics",
    .tag = "health",
    .summary = "Prometheus text exposition: host and per-tenant aggregates",
    .description = "Sessions by tenant and state, creates, create and exec latency histograms, errors by code, "
                   "limit events by kind, HTTP requests by route, audit records by kind, and the egress, package "
                   "and pool families. No per-session labels; each family keeps at most a bounded number of "
                   "label sets (then `_other`). Host admin only unless the daemon sets metrics.public.",
    .responses = {ResponseDoc{200, "text format 0.0.4",
                              {ContentDoc{"text/plain", string_schema("Prometheus text exposition")}}, {}}},
    .errors = {"forbidden"},
};

const RouteDoc session_metrics{
    .operation_id = "getSessionMetrics",
    .tag = "sessions",
    .summary = "A session's resource use now, its limit events and a sampled history",
    .description = "Read from the session's cgroups when asked. disk_written_bytes is null while the writable "
                   "layer is memory-backed (no block device writes to count); net bytes are the counters of "
                   "the session's network namespace plus what the egress proxy relayed. An ended session "
                   "answers its recorded limit events and wall time with live = false.",
    .params = {session_param()},
    .responses = {json_response(
        200, "the metrics",
        object_schema({{"session_id", string_schema()},
                       {"state", string_schema()},
                       {"live", boolean_schema()},
                       {"cpu_ms", integer_schema()},
                       {"cpu_throttled_ms", integer_schema()},
                       {"memory_bytes", integer_schema()},
                       {"memory_peak_bytes", integer_schema()},
                       {"pids", integer_schema()},
                       {"pids_peak", integer_schema()},
                       {"disk_used_bytes", nullable(integer_schema())},
                       {"disk_written_bytes", nullable(integer_schema())},
                       {"net_tx_bytes", nullable(integer_schema())},
                       {"net_rx_bytes", nullable(integer_schema())},
                       {"wall_ms", integer_schema()},
                       {"oom_kills", integer_schema()},
                       {"processes_executed", integer_schema()},
                       {"seccomp_violations", integer_schema()},
                       {"limit_events", array_of(limit_event_schema())},
                       {"history", array_of(object_schema({{"at", string_schema()},
                                                           {"cpu_ms", integer_schema()},
                                                           {"memory_bytes", integer_schema()},
                                                           {"pids", integer_schema()},
                                                           {"disk_used_bytes", integer_schema()}},
                                                          {"at", "cpu_ms", "memory_bytes", "pids"}))}},
                      {"session_id", "state", "live", "cpu_ms", "memory_bytes", "pids", "wall_ms", "oom_kills",
                       "limit_events", "history"}))},
    .errors = {"not_found"},
};

const RouteDoc session_events{
    .operation_id = "getSessionEvents",
    .tag = "sessions",
    .summary = "A session's lifecycle and limit events (audit kinds session.* and limit.*)",
    .description = "Oldest first. With follow=1: server-sent events, one per record (event = its kind, id = "
                   "its seq, data = the record), live until the session's end is recorded; reconnect with "
                   "Last-Event-ID to resume after a seq.",
    .params = {session_param(), query_flag("follow", "stream as text/event-stream"),
               query_param("after", integer_schema("seq"), "only records after this seq"),
               ParamDoc{"Last-Event-ID", "header", integer_schema("seq"), "with follow: resume after this seq"}},
    .responses = {ResponseDoc{200,
                              "the events (JSON), or with follow the event stream",
                              {ContentDoc{"application/json",
                                          object_schema({{"events", array_of(audit_record_schema())}}, {"events"})},
                               ContentDoc{"text/event-stream", string_schema("one event per record")}},
                              {}}},
    .errors = {"not_found", "invalid_request"},
};

const RouteDoc list_audit{
    .operation_id = "listAudit",
    .tag = "audit",
    .summary = "The caller's tenant's audit records, oldest first",
    .description = "Filters combine. kind is exact (exec.start) or a prefix ending in a dot (limit.); it may "
                   "repeat. Pages with next_cursor. format=jsonl answers JSON lines (application/x-ndjson), "
                   "the next cursor then in the X-Next-Cursor header.",
    .params = {query_param("session", string_schema(), "one session's records"),
               query_param("kind", string_schema(), "a kind or a kind prefix ending in '.'"),
               query_param("since", string_schema("RFC 3339"), "records at or after this time"),
               query_param("limit", bounded(integer_schema(), 1, 1000), "default 100"),
               query_param("cursor", string_schema(), "next_cursor of the previous page"),
               query_param("format", enum_schema({"json", "jsonl"}), "default json")},
    .responses = {ResponseDoc{200,
                              "a page of records",
                              {ContentDoc{"application/json",
                                          object_schema({{"records", array_of(audit_record_schema())},
                                                         {"next_cursor", nullable(string_schema())}},
                                                        {"records", "next_cursor"})},
                               ContentDoc{"application/x-ndjson", string_schema("one record per line")}},
                              {}}},
    .errors = {"invalid_request"},
};

}  // namespace cela::api::docs
