#include "api/openapi.h"

#include <algorithm>
#include <boost/json.hpp>
#include <cctype>
#include <map>
#include <optional>

#include "api/http_error.h"
#include "api/route_docs.h"

namespace cela::api {
namespace json = boost::json;

namespace {

// Every code of http_error.h, by its factory (the status comes from there, not from a
// second table), with when it is answered (API.md "Errors").
struct DocumentedError {
  ApiError error;
  const char* when;
};

std::optional<DocumentedError> error_of(std::string_view code) {
  static const std::vector<DocumentedError> all = {
      {ApiError::invalid_request(""),
       "malformed JSON, unknown field, wrong type, bad value or query"},
      {ApiError::unauthorized(), "missing or unknown key (TCP)"},
      {ApiError::forbidden(""), "not allowed for this key (admin routes, sandbox permissions)"},
      {ApiError::policy_denied(""), "a feature refused by policy"},
      {ApiError::not_found(""), "unknown id (or another tenant's), or no such path"},
      {ApiError::method_not_allowed(""), "known path, other method"},
      {ApiError::request_timeout(""), "the body did not arrive in time"},
      {ApiError::conflict(""),
       "wrong state (e.g. output of a running exec, stdin of an ended one)"},
      {ApiError::gone(""), "the session has ended; its reason is in the message"},
      {ApiError::payload_too_large(""), "body, file or archive over its limit"},
      {ApiError::unsupported_media_type(""), "a body of a type the route does not take"},
      {ApiError::quota_exceeded(""), "tenant quota: live sessions, total memory, cpus per session"},
      {ApiError::rate_limited("", 1),
       "too many connections from this client or requests in flight for this key; Retry-After"},
      {ApiError::internal(), "a bug; the request id is in the daemon's log"},
      {ApiError::bad_gateway(""), "port proxy: nothing listens on the port inside, or its server failed"},
      {ApiError::capacity_exceeded(""),
       "host-wide session or connection limit, or out of file descriptors; Retry-After"},
  };
  for (const DocumentedError& e : all)
    if (e.error.code == code) return e;
  return std::nullopt;
}

bool is_capture(std::string_view segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

const ParamDoc* find_param(const RouteDoc& doc, std::string_view in, std::string_view name) {
  for (const ParamDoc& p : doc.params)
    if (p.in == in && p.name == name) return &p;
  return nullptr;
}

json::object parameter(const ParamDoc& p) {
  json::object o{{"name", p.name}, {"in", p.in}, {"required", p.in == "path" || p.required}};
  if (!p.description.empty()) o["description"] = p.description;
  o["schema"] = p.schema.is_null() ? json::value(json::object{{"type", "string"}}) : p.schema;
  return o;
}

// Path parameters in the pattern's order (described by the doc when it says more),
// then the doc's query and header parameters.
json::array parameters(const Route& route) {
  json::array out;
  for (const std::string& segment : route.segments) {
    if (!is_capture(segment)) continue;
    std::string name = segment.substr(1, segment.size() - 2);
    if (name.ends_with("...")) name.resize(name.size() - 3);  // a {name...} tail capture
    if (const ParamDoc* p = find_param(route.doc, "path", name)) {
      out.push_back(parameter(*p));
    } else {
      out.push_back(parameter(docs::path_param(name, "")));
    }
  }
  for (const ParamDoc& p : route.doc.params)
    if (p.in != "path") out.push_back(parameter(p));
  return out;
}

json::object content(const std::vector<ContentDoc>& items) {
  json::object o;
  for (const ContentDoc& c : items) o[c.media_type] = json::object{{"schema", c.schema}};
  return o;
}

json::object header(std::string description, json::value schema) {
  return json::object{{"description", std::move(description)}, {"schema", std::move(schema)}};
}

json::object success_response(const ResponseDoc& r) {
  json::object o{{"description", r.description.empty() ? std::string("success") : r.description}};
  if (!r.content.empty()) o["content"] = content(r.content);
  if (!r.headers.empty()) {
    json::object headers;
    for (const HeaderDoc& h : r.headers) headers[h.name] = header(h.description, h.schema);
    o["headers"] = std::move(headers);
  }
  return o;
}

json::object error_response(const std::vector<DocumentedError>& errors, ErrorStyle style) {
  std::string description;
  bool retry_after = false, www_authenticate = false;
  for (const DocumentedError& e : errors) {
    if (!description.empty()) description += "; ";
    description += e.error.code + ": " + e.when;
    retry_after = retry_after || e.error.retry_after_s.has_value();
    www_authenticate = www_authenticate || e.error.status == 401;
  }
  json::object o{{"description", description},
                 {"content", json::object{{"application/json",
                                           json::object{{"schema", docs::ref(style == ErrorStyle::e2b ? "E2bError" : "Error")}}}}}};
  json::object headers;
  if (retry_after)
    headers["Retry-After"] = header("seconds to wait before retrying", docs::integer_schema());
  if (www_authenticate) headers["WWW-Authenticate"] = header("Bearer", docs::string_schema());
  if (!headers.empty()) o["headers"] = std::move(headers);
  return o;
}

json::object responses(const Route& route) {
  json::object out;
  for (const ResponseDoc& r : route.doc.responses)
    out[std::to_string(r.status)] = success_response(r);
  std::map<int, std::vector<DocumentedError>> by_status;
  for (const std::string& code : documented_error_codes(route)) {
    if (auto e = error_of(code)) by_status[e->error.status].push_back(*e);
  }
  for (const auto& [status, errors] : by_status)
    out[std::to_string(status)] = error_response(errors, route.options.error_style);
  return out;
}

json::object operation(const Route& route) {
  const RouteDoc& doc = route.doc;
  json::object op;
  if (!doc.operation_id.empty()) op["operationId"] = doc.operation_id;
  if (!doc.tag.empty()) op["tags"] = json::array{json::value(doc.tag)};
  op["summary"] = doc.summary;
  if (!doc.description.empty()) op["description"] = doc.description;
  if (json::array params = parameters(route); !params.empty()) op["parameters"] = std::move(params);
  for (const RequestBodyDoc& b : doc.body) {
    json::object body{{"required", b.required}, {"content", content(b.content)}};
    if (!b.description.empty()) body["description"] = b.description;
    op["requestBody"] = std::move(body);
  }
  op["responses"] = responses(route);
  if (route.options.public_route) op["security"] = json::array{};
  return op;
}

json::array tags() {
  json::array out;
  for (auto [name, description] :
       {std::pair{"health", "liveness, readiness and this document (public)"},
        std::pair{"sessions", "sandboxes: create, list, extend, terminate"},
        std::pair{"execs", "processes in a session: start, output (SSE), stdin, kill"},
        std::pair{"files", "files of a session, resolved inside its root"},
        std::pair{"admin", "tenants and keys (admin key)"},
        std::pair{"audit", "the hash-chained audit log, tenant-scoped"},
        std::pair{"secrets", "tenant secrets: set, list (names only), delete"},
        std::pair{"e2b", "E2B's control plane (docs/e2b.md): sandboxes for E2B's SDKs, errors in E2B's shape"}})
    out.push_back(json::object{{"name", name}, {"description", description}});
  return out;
}

}  // namespace

bool is_error_code(std::string_view code) {
  return error_of(code).has_value();
}

std::vector<std::string> documented_error_codes(const Route& route) {
  std::vector<std::string> codes = route.doc.errors;
  auto add = [&](const char* code) {
    if (std::find(codes.begin(), codes.end(), code) == codes.end()) codes.emplace_back(code);
  };
  add("invalid_request");
  if (!route.options.public_route) add("unauthorized");
  if (!route.doc.body.empty()) {
    add("payload_too_large");
    add("request_timeout");
  }
  add("rate_limited");  // per client connections, per key requests in flight
  add("internal");
  add("capacity_exceeded");
  return codes;
}

std::string openapi_method(http::verb method) {
  std::string name(http::to_string(method));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return name;
}

std::string openapi_path(std::string_view pattern) {
  std::string path(pattern);
  if (path.ends_with("...}")) path.erase(path.size() - 4, 3);
  return path;
}

json::object openapi_document(const Router& router) {
  json::object paths;
  for (const Route& route : router.routes()) {
    json::value& item = paths[openapi_path(route.pattern)];
    if (!item.is_object()) item = json::object{};
    item.as_object()[openapi_method(route.method)] = operation(route);
  }
  return {{"openapi", "3.0.3"},
          {"info",
           {{"title", "cela"},
            {"version", "1"},
            {"description",
             "Sandbox sessions for untrusted code (docs/api.md). Local root on the unix socket "
             "needs no key; TCP callers send Authorization: Bearer <key>."}}},
          {"tags", tags()},
          {"paths", std::move(paths)},
          {"components",
           {{"schemas", component_schemas()},
            {"securitySchemes", {{"bearer", {{"type", "http"}, {"scheme", "bearer"}}}}}}},
          {"security", json::array{json::object{{"bearer", json::array{}}}}}};
}

}  // namespace cela::api
