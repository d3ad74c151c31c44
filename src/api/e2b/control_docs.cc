#include "api/e2b/control_docs.h"

#include <boost/json.hpp>

#include "api/route_docs.h"

namespace cela::api::e2b::docs {
namespace json = boost::json;
using namespace cela::api::docs;

namespace {

constexpr const char* kTag = "e2b";

ParamDoc sandbox_id() { return path_param("id", "sandbox id: the cela session id (s-...)"); }

RequestBodyDoc timeout_body(bool required) {
  return json_body(ref("E2bTimeout"), required,
                   "`timeout`: whole seconds from now, 1 to the server's longest TTL");
}

std::vector<ParamDoc> list_params() {
  return {query_param("metadata", string_schema(),
                      "form-encoded key=value pairs (each key and value encoded once more, as the JS SDK "
                      "sends them): sandboxes whose metadata holds every pair"),
          query_param("state", string_schema(), "running and/or paused, comma separated or repeated; default both"),
          query_param("limit", bounded(integer_schema(), 1, 1000), "page size, default 100"),
          query_param("nextToken", string_schema(), "the X-Next-Token of the previous page"),
          query_param("order", enum_schema({"desc"}), "newest first, the only order"),
          query_param("template", string_schema(), "refused: not supported"),
          query_param("startedAfter", string_schema(), "refused: not supported")};
}

ResponseDoc listed_response() {
  ResponseDoc r = json_response(200, "live sandboxes of the caller's tenant, newest first",
                                array_of(ref("E2bListedSandbox")));
  r.headers.push_back(HeaderDoc{"X-Next-Token", "present when there is another page", string_schema()});
  return r;
}

json::value metadata_schema() { return string_map("string keys and values"); }

// The path an older SDK calls for the same operation: the same doc under its own id.
RouteDoc older(const RouteDoc& current, std::string operation_id, std::string summary) {
  RouteDoc d = current;
  d.operation_id = std::move(operation_id);
  d.summary = std::move(summary);
  d.description.clear();
  return d;
}

}  // namespace

const RouteDoc create_sandbox_v2{
    .operation_id = "e2bCreateSandboxV2",
    .tag = kTag,
    .summary = "Create a sandbox (E2B): a cela session made as POST /v1/sessions would",
    .description = "templateID is a cela template name (or alias), default base; timeout the TTL in seconds "
                   "(default 300); envVars the env of every exec; metadata the session's; autoPause pauses "
                   "instead of ending at the TTL; allow_internet_access / network.allowOut open cela's egress "
                   "allowlist (without them: no network). docs/e2b.md \"Control plane\".",
    .body = {json_body(ref("E2bNewSandbox"), true)},
    .responses = {json_response(201, "the sandbox and its data-plane tokens", ref("E2bSandbox"))},
    .errors = {"not_found", "forbidden", "policy_denied", "quota_exceeded"},
};

const RouteDoc create_sandbox =
    older(create_sandbox_v2, "e2bCreateSandbox", "Create a sandbox (E2B, older SDKs): as POST /v2/sandboxes");

const RouteDoc list_sandboxes_v2{
    .operation_id = "e2bListSandboxesV2",
    .tag = kTag,
    .summary = "List sandboxes (E2B)",
    .params = list_params(),
    .responses = {listed_response()},
};

const RouteDoc list_sandboxes =
    older(list_sandboxes_v2, "e2bListSandboxes", "List sandboxes (E2B, older SDKs): as GET /v2/sandboxes");

const RouteDoc get_sandbox{
    .operation_id = "e2bGetSandbox",
    .tag = kTag,
    .summary = "A sandbox (E2B); an ended one or another tenant's is not found",
    .params = {sandbox_id()},
    .responses = {json_response(200, "the sandbox", ref("E2bSandboxDetail"))},
    .errors = {"not_found"},
};

const RouteDoc kill_sandbox{
    .operation_id = "e2bKillSandbox",
    .tag = kTag,
    .summary = "End a sandbox (E2B): DELETE /v1/sessions/{id}; 404 once it has ended",
    .params = {sandbox_id()},
    .responses = {empty_response(204, "ended")},
    .errors = {"not_found"},
};

const RouteDoc set_sandbox_timeout{
    .operation_id = "e2bSetSandboxTimeout",
    .tag = kTag,
    .summary = "The sandbox ends `timeout` seconds from now (E2B): PATCH ttl_s",
    .params = {sandbox_id()},
    .body = {timeout_body(true)},
    .responses = {empty_response(204, "the new TTL is set")},
    .errors = {"not_found"},
};

const RouteDoc pause_sandbox{
    .operation_id = "e2bPauseSandbox",
    .tag = kTag,
    .summary = "Pause a sandbox (E2B): POST /v1/sessions/{id}/pause; kept paused for the server's longest TTL",
    .params = {sandbox_id()},
    .body = {json_body(object_schema({{"memory", boolean_schema("accepted; a cela pause always keeps memory")}}, {},
                                     {}, false))},
    .responses = {empty_response(204, "paused")},
    .errors = {"not_found", "conflict"},
};

const RouteDoc connect_sandbox_v2{
    .operation_id = "e2bConnectSandboxV2",
    .tag = kTag,
    .summary = "Connect to a sandbox (E2B), resuming it when paused; a timeout is its TTL from now",
    .params = {sandbox_id()},
    .body = {timeout_body(false)},
    .responses = {json_response(200, "it was running", ref("E2bSandbox")),
                  json_response(201, "it was resumed from pause", ref("E2bSandbox"))},
    .errors = {"not_found"},
};

const RouteDoc connect_sandbox = older(connect_sandbox_v2, "e2bConnectSandbox",
                                       "Connect to a sandbox (E2B, older SDKs): as POST /v2/sandboxes/{id}/connect");

const RouteDoc resume_sandbox{
    .operation_id = "e2bResumeSandbox",
    .tag = kTag,
    .summary = "Resume a paused sandbox (E2B, older SDKs); 409 when it is not paused",
    .params = {sandbox_id()},
    .body = {timeout_body(false)},
    .responses = {json_response(201, "resumed", ref("E2bSandbox"))},
    .errors = {"not_found", "conflict"},
};

const RouteDoc sandbox_metrics{
    .operation_id = "e2bSandboxMetrics",
    .tag = kTag,
    .summary = "A sandbox's metrics (E2B): the sampled history of GET /v1/sessions/{id}/metrics, then now",
    .params = {sandbox_id(), query_param("start", integer_schema(), "unix seconds: points at or after"),
               query_param("end", integer_schema(), "unix seconds: points at or before")},
    .responses = {json_response(200, "oldest first", array_of(ref("E2bSandboxMetric")))},
    .errors = {"not_found"},
};

json::object schemas() {
  json::object s;
  s["E2bError"] = object_schema({{"code", integer_schema("the HTTP status")}, {"message", string_schema()}},
                                {"code", "message"}, "E2B's error shape");
  s["E2bTimeout"] = object_schema({{"timeout", integer_schema("seconds")}}, {}, {}, false);
  s["E2bNewSandbox"] = object_schema(
      {{"templateID", string_schema("a cela template name or alias; default base")},
       {"timeout", integer_schema("seconds; default 300")},
       {"metadata", metadata_schema()},
       {"envVars", string_map("the env of every exec")},
       {"autoPause", boolean_schema("pause instead of ending at the timeout")},
       {"autoPauseMemory", boolean_schema("accepted; a cela pause keeps memory")},
       {"autoResume", object_schema({{"enabled", boolean_schema()}}, {}, {}, false)},
       {"secure", boolean_schema("accepted; tokens are always issued and checked")},
       {"allow_internet_access", boolean_schema("true: egress allowlist *:*; default: no network")},
       {"network", object_schema({{"allowOut", array_of(string_schema())},
                                  {"denyOut", array_of(string_schema())},
                                  {"allowPublicTraffic", boolean_schema("accepted; tokens are always required")}},
                                 {}, "rules, egressProxy, maskRequestHost, httpsPorts are refused", false)},
       {"volumeMounts", array_of(object_schema({{"name", string_schema()}, {"path", string_schema()}},
                                               {"name", "path"}))}},
      {}, "unknown fields are ignored; mcp and iam are refused", false);
  s["E2bSandbox"] = object_schema({{"templateID", string_schema()},
                                   {"sandboxID", string_schema()},
                                   {"alias", string_schema()},
                                   {"clientID", string_schema()},
                                   {"envdVersion", string_schema()},
                                   {"envdAccessToken", string_schema()},
                                   {"trafficAccessToken", string_schema()},
                                   {"domain", nullable(string_schema())}},
                                  {"templateID", "sandboxID", "clientID", "envdVersion"});
  auto listed = [](std::initializer_list<std::pair<std::string_view, json::value>> more) {
    json::object props{{"templateID", string_schema()},
                       {"alias", string_schema()},
                       {"sandboxID", string_schema()},
                       {"clientID", string_schema()},
                       {"startedAt", string_schema("RFC 3339")},
                       {"endAt", string_schema("RFC 3339")},
                       {"cpuCount", integer_schema()},
                       {"memoryMB", integer_schema()},
                       {"diskSizeMB", integer_schema()},
                       {"metadata", string_map()},
                       {"state", enum_schema({"running", "paused"})},
                       {"envdVersion", string_schema()},
                       {"volumeMounts", array_of(object_schema({{"name", string_schema()}, {"path", string_schema()}}))}};
    for (const auto& [k, v] : more) props[k] = v;
    return json::object{{"type", "object"},
                        {"properties", std::move(props)},
                        {"required", json::array{"templateID", "sandboxID", "clientID", "startedAt", "endAt",
                                                 "cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion"}}};
  };
  s["E2bListedSandbox"] = listed({});
  s["E2bSandboxDetail"] = listed(
      {{"envdAccessToken", string_schema()},
       {"domain", nullable(string_schema())},
       {"allowInternetAccess", boolean_schema("cela's network mode is allowlist")},
       {"network", object_schema({{"allowOut", array_of(string_schema())},
                                  {"denyOut", array_of(string_schema())},
                                  {"allowPublicTraffic", boolean_schema()}},
                                 {}, {}, false)},
       {"lifecycle", object_schema({{"onTimeout", enum_schema({"pause", "kill"})}, {"autoResume", boolean_schema()}},
                                   {"onTimeout", "autoResume"})}});
  s["E2bSandboxMetric"] = object_schema({{"timestamp", string_schema("RFC 3339")},
                                         {"timestampUnix", integer_schema()},
                                         {"cpuCount", integer_schema()},
                                         {"cpuUsedPct", number_schema("since the previous point, of all its CPUs")},
                                         {"memUsed", integer_schema("bytes")},
                                         {"memTotal", integer_schema("bytes: the memory limit")},
                                         {"memCache", integer_schema("not measured: 0")},
                                         {"diskUsed", integer_schema("bytes")},
                                         {"diskTotal", integer_schema("bytes: the disk limit")}},
                                        {"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed",
                                         "memTotal", "memCache", "diskUsed", "diskTotal"});
  return s;
}

}  // namespace cela::api::e2b::docs
