#include "api/openapi.h"

#include <boost/json.hpp>
#include <set>

namespace cela::api {
namespace json = boost::json;

const std::vector<ApiOperation>& api_operations() {
  static const std::vector<ApiOperation> ops = {
      {"get", "/healthz", "Liveness", 200},
      {"get", "/readyz", "Readiness and capacity", 200},
      {"get", "/v1/openapi.json", "This document", 200},
      {"post", "/v1/sessions", "Create a session; answers when it can run code (?wait_s= waits for capacity)", 201},
      {"get", "/v1/sessions", "List sessions (state, metadata.K=V, limit, cursor)", 200},
      {"get", "/v1/sessions/{id}", "Get a session", 200},
      {"patch", "/v1/sessions/{id}", "Change ttl_s", 200},
      {"delete", "/v1/sessions/{id}", "Terminate a session (idempotent); answers the cleanup report", 200},
      {"post", "/v1/sessions/{id}/execs", "Start an exec", 202},
      {"post", "/v1/sessions/{id}/run", "Run an exec to its end; answers the record with its output", 200},
      {"get", "/v1/sessions/{id}/execs/{eid}", "Get an exec record", 200},
      {"get", "/v1/sessions/{id}/execs/{eid}/output", "Output after the end, or live with ?follow=1 (SSE)", 200},
      {"post", "/v1/sessions/{id}/execs/{eid}/stdin", "Write to stdin (?close=1 closes it)", 204},
      {"post", "/v1/sessions/{id}/execs/{eid}/kill", "Signal the exec's whole process tree, SIGKILL after grace_s", 202},
      {"put", "/v1/sessions/{id}/files", "Upload a file (?path=, ?mode=)", 201},
      {"get", "/v1/sessions/{id}/files", "Download a file (?path=)", 200},
      {"head", "/v1/sessions/{id}/files", "File size and mtime (?path=)", 200},
      {"delete", "/v1/sessions/{id}/files", "Delete a file or directory (?path=, ?recursive=1)", 204},
      {"get", "/v1/sessions/{id}/fs", "List a directory (?path=, ?depth=)", 200},
      {"post", "/v1/sessions/{id}/fs/mkdir", "Create a directory {path, parents}", 201},
      {"post", "/v1/sessions/{id}/fs/move", "Move or rename {from, to, overwrite}", 200},
      {"get", "/v1/sessions/{id}/archive", "Export a directory as tar (?path=)", 200},
      {"put", "/v1/sessions/{id}/archive", "Extract a tar into a directory (?path=)", 200},
      {"post", "/v1/tenants", "Create a tenant with quotas (admin)", 201},
      {"post", "/v1/tenants/{t}/keys", "Issue an API key for a tenant (admin); shown once", 201},
  };
  return ops;
}

json::object openapi_document() {
  json::object error_schema = {
      {"type", "object"},
      {"properties",
       {{"error",
         {{"type", "object"},
          {"required", json::array{"code", "category", "message", "request_id", "retryable"}},
          {"properties",
           {{"code", {{"type", "string"}}},
            {"category", {{"type", "string"}, {"enum", json::array{"user", "policy", "quota", "platform"}}}},
            {"message", {{"type", "string"}}},
            {"session_id", {{"type", json::array{"string", "null"}}}},
            {"exec_id", {{"type", json::array{"string", "null"}}}},
            {"request_id", {{"type", "string"}}},
            {"retryable", {{"type", "boolean"}}},
            {"retry_after_s", {{"type", json::array{"integer", "null"}}}}}}}}}}};
  json::object paths;
  for (const auto& op : api_operations()) {
    json::object& item = paths[op.path].emplace_object();
    json::array params;
    std::string p = op.path;
    for (size_t i = p.find('{'); i != std::string::npos; i = p.find('{', i + 1)) {
      std::string name = p.substr(i + 1, p.find('}', i) - i - 1);
      params.push_back({{"name", name}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}});
    }
    json::object operation = {
        {"summary", op.summary},
        {"responses",
         {{std::to_string(op.status), {{"description", "success"}}},
          {"default",
           {{"description", "error"},
            {"content", {{"application/json", {{"schema", {{"$ref", "#/components/schemas/Error"}}}}}}}}}}}};
    if (!params.empty()) operation["parameters"] = params;
    item[op.method] = operation;
  }
  return {{"openapi", "3.0.3"},
          {"info", {{"title", "cela"}, {"version", "1"}, {"description", "Sandbox sessions for untrusted code"}}},
          {"components",
           {{"schemas", {{"Error", error_schema}}},
            {"securitySchemes", {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}}}}},
          {"security", json::array{json::object{{"bearer", json::array{}}}}},
          {"paths", paths}};
}

}  // namespace cela::api
