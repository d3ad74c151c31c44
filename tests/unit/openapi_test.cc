// The OpenAPI document against the daemon's route table: every registered route is in
// the document and nothing else is (both directions), every route is really described
// (summary, ids, parameters of its pattern, known error codes, resolvable $refs), and
// the component schemas accept what the code really renders (api/render.cc render,
// http_error.cc error_body). The document's validity as OpenAPI 3 is checked by a real
// validator in tests/openapi/ (ctest openapi.validate).
#include "api/e2b/control.h"
#include "api/openapi.h"
#include "api/render.h"
#include "common/json_text.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "../openapi/daemon_routes.h"
#include "api/http_error.h"
#include "api/route_docs.h"
#include "store/records.h"

namespace cela::api {
namespace {
namespace json = boost::json;

std::string operation_name(const std::string& method, const std::string& path) {
  return method + " " + path;
}

// Routes of the table the document does not describe.
std::vector<std::string> routes_missing_from(const Router& router, const json::object& doc) {
  std::vector<std::string> missing;
  const json::object& paths = doc.at("paths").as_object();
  for (const Route& route : router.routes()) {
    const json::value* item = paths.if_contains(openapi_path(route.pattern));
    std::string method = openapi_method(route.method);
    if (!item || !item->as_object().contains(method))
      missing.push_back(operation_name(method, openapi_path(route.pattern)));
  }
  return missing;
}

// Operations of the document no route serves.
std::vector<std::string> operations_not_routed(const Router& router, const json::object& doc) {
  std::set<std::string> routed;
  for (const Route& route : router.routes())
    routed.insert(operation_name(openapi_method(route.method), openapi_path(route.pattern)));
  static const std::set<std::string> kMethods = {"get",     "put",  "post",  "delete",
                                                 "options", "head", "patch", "trace"};
  std::vector<std::string> extra;
  for (const auto& [path, item] : doc.at("paths").as_object()) {
    for (const auto& [key, op] : item.as_object()) {
      if (!kMethods.contains(std::string(key))) continue;
      std::string name = operation_name(std::string(key), std::string(path));
      if (!routed.contains(name)) extra.push_back(name);
    }
  }
  return extra;
}

void collect_refs(const json::value& v, std::vector<std::string>& out) {
  if (v.is_object()) {
    for (const auto& [k, x] : v.as_object()) {
      if (k == "$ref" && x.is_string()) out.emplace_back(x.as_string());
      collect_refs(x, out);
    }
  } else if (v.is_array()) {
    for (const auto& x : v.as_array()) collect_refs(x, out);
  }
}

// A small checker of a value against the subset of schema the components use ($ref,
// allOf, anyOf, nullable, type, enum, properties, required, additionalProperties,
// items). Appends one line per mismatch.
void check(const json::value& value, const json::value& schema, const std::string& where,
           std::vector<std::string>& errors) {
  const json::object& s = schema.as_object();
  if (const json::value* r = s.if_contains("$ref")) {
    std::string name(r->as_string());
    name = name.substr(name.rfind('/') + 1);
    const json::value* target = component_schemas().if_contains(name);
    if (!target) return errors.push_back(where + ": unknown $ref " + name);
    return check(value, *target, where, errors);
  }
  if (value.is_null()) {
    if (!(s.contains("nullable") && s.at("nullable").as_bool()))
      errors.push_back(where + ": null not allowed");
    return;
  }
  if (const json::value* all = s.if_contains("allOf")) {
    // Members may each be open; closedness is checked against the merged properties.
    for (const auto& part : all->as_array()) {
      json::object open = part.as_object();
      if (open.contains("properties")) open["additionalProperties"] = true;
      check(value, open, where, errors);
    }
  }
  if (const json::value* any = s.if_contains("anyOf")) {
    bool ok = false;
    for (const auto& part : any->as_array()) {
      std::vector<std::string> e;
      check(value, part, where, e);
      ok = ok || e.empty();
    }
    if (!ok) errors.push_back(where + ": matches none of anyOf");
  }
  if (const json::value* t = s.if_contains("type")) {
    std::string type(t->as_string());
    bool ok = (type == "object" && value.is_object()) || (type == "array" && value.is_array()) ||
              (type == "string" && value.is_string()) || (type == "boolean" && value.is_bool()) ||
              (type == "integer" && (value.is_int64() || value.is_uint64())) ||
              (type == "number" && (value.is_number()));
    if (!ok) return errors.push_back(where + ": not " + type + ": " + json::serialize(value));
  }
  if (const json::value* e = s.if_contains("enum")) {
    bool ok = false;
    for (const auto& x : e->as_array()) ok = ok || x == value;
    if (!ok) errors.push_back(where + ": " + json::serialize(value) + " not in enum");
  }
  if (value.is_object()) {
    const json::object& o = value.as_object();
    const json::object* props =
        s.contains("properties") ? &s.at("properties").as_object() : nullptr;
    if (const json::value* req = s.if_contains("required")) {
      for (const auto& k : req->as_array())
        if (!o.contains(k.as_string()))
          errors.push_back(where + ": missing " + std::string(k.as_string()));
    }
    bool closed = s.contains("additionalProperties") && s.at("additionalProperties").is_bool() &&
                  !s.at("additionalProperties").as_bool();
    for (const auto& [k, v] : o) {
      if (props && props->contains(k)) {
        check(v, props->at(k), where + "." + std::string(k), errors);
      } else if (const json::value* extra = s.if_contains("additionalProperties");
                 extra && extra->is_object()) {
        check(v, *extra, where + "." + std::string(k), errors);
      } else if (closed) {
        errors.push_back(where + ": property `" + std::string(k) + "` is not in the schema");
      }
    }
  }
  if (value.is_array() && s.contains("items")) {
    for (const auto& x : value.as_array()) check(x, s.at("items"), where + "[]", errors);
  }
}

std::vector<std::string> check_component(const json::value& value, const std::string& component) {
  std::vector<std::string> errors;
  check(value, docs::ref(component), component, errors);
  return errors;
}

class OpenApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto routes = test_support::DaemonRoutes::open();
    ASSERT_TRUE(routes) << routes.error().message();
    routes_ = std::move(*routes).release();
    doc_ = new json::object(openapi_document(routes_->router()));
  }
  static void TearDownTestSuite() {
    delete doc_;
    delete routes_;
  }
  const Router& router() { return routes_->router(); }
  const json::object& doc() { return *doc_; }
  const json::object& op(const std::string& method, const std::string& path) {
    return doc().at("paths").at(path).at(method).as_object();
  }

  static test_support::DaemonRoutes* routes_;
  static json::object* doc_;
};
test_support::DaemonRoutes* OpenApi::routes_ = nullptr;
json::object* OpenApi::doc_ = nullptr;

TEST_F(OpenApi, EveryRegisteredRouteIsInTheDocumentAndNothingElse) {
  // The daemon registers more than the three health/doc routes.
  ASSERT_GE(router().routes().size(), 20u);
  EXPECT_EQ(routes_missing_from(router(), doc()), std::vector<std::string>{});
  EXPECT_EQ(operations_not_routed(router(), doc()), std::vector<std::string>{});
}

TEST_F(OpenApi, TheComparisonFindsARouteDroppedFromTheDocument) {
  // The two checks above must be able to fail: drop one operation, add a stray one.
  json::object broken = doc();
  broken["paths"].as_object()["/v1/sessions/{id}"].as_object().erase("delete");
  broken["paths"].as_object()["/v1/nowhere"] = json::object{{"get", json::object{}}};
  EXPECT_EQ(routes_missing_from(router(), broken),
            std::vector<std::string>{"delete /v1/sessions/{id}"});
  EXPECT_EQ(operations_not_routed(router(), broken), std::vector<std::string>{"get /v1/nowhere"});
}

TEST_F(OpenApi, EveryRouteIsDescribed) {
  std::set<std::string> operation_ids;
  for (const Route& route : router().routes()) {
    std::string name = operation_name(openapi_method(route.method), route.pattern);
    const RouteDoc& d = route.doc;
    EXPECT_FALSE(d.summary.empty()) << name << ": no summary";
    EXPECT_FALSE(d.tag.empty()) << name << ": no tag";
    EXPECT_TRUE(operation_ids.insert(d.operation_id).second)
        << name << ": operation id `" << d.operation_id << "` empty or used twice";
    EXPECT_FALSE(d.responses.empty()) << name << ": no success response";
    // Success is 2xx, or 101 for a WebSocket upgrade.
    for (const ResponseDoc& r : d.responses) EXPECT_TRUE(r.status == 101 || (r.status >= 200 && r.status < 300)) << name;
    for (const std::string& code : d.errors)
      EXPECT_TRUE(is_error_code(code)) << name << ": unknown error `" << code << "`";
    // Path parameters: each capture of the pattern described, nothing else.
    std::set<std::string> captures;
    for (const std::string& s : route.segments)
      if (s.size() > 2 && s.front() == '{')
        captures.insert(s.ends_with("...}") ? s.substr(1, s.size() - 5) : s.substr(1, s.size() - 2));
    std::set<std::string> described;
    for (const ParamDoc& p : d.params) {
      EXPECT_TRUE(p.in == "path" || p.in == "query" || p.in == "header") << name << ": " << p.in;
      if (p.in == "path") described.insert(p.name);
    }
    EXPECT_EQ(captures, described) << name << ": path parameters";
  }
}

TEST_F(OpenApi, EveryReferenceResolves) {
  std::vector<std::string> refs;
  collect_refs(doc(), refs);
  ASSERT_FALSE(refs.empty());
  for (const std::string& r : refs) {
    ASSERT_TRUE(r.starts_with("#/components/schemas/")) << r;
    EXPECT_TRUE(component_schemas().contains(r.substr(21))) << r;
  }
}

TEST_F(OpenApi, ErrorsUseTheErrorSchemaWithTheirStatus) {
  const json::object& get_session = op("get", "/v1/sessions/{id}");
  const json::object& responses = get_session.at("responses").as_object();
  for (const char* status : {"400", "401", "404", "500", "503"}) {
    ASSERT_TRUE(responses.contains(status)) << status;
    EXPECT_EQ(
        json::serialize(responses.at(status).at("content").at("application/json").at("schema")),
        R"({"$ref":"#/components/schemas/Error"})");
  }
  EXPECT_NE(std::string(responses.at("404").at("description").as_string()).find("not_found"),
            std::string::npos);
  EXPECT_TRUE(responses.at("503").at("headers").as_object().contains("Retry-After"));
  // Every route may answer 429: connections per client, requests in flight per key.
  EXPECT_TRUE(responses.at("429").at("headers").as_object().contains("Retry-After"));
  EXPECT_TRUE(op("get", "/healthz").at("responses").as_object().contains("429"));
  // Public routes need no key, so they never answer 401.
  EXPECT_FALSE(op("get", "/healthz").at("responses").as_object().contains("401"));
  EXPECT_EQ(op("get", "/healthz").at("security"), json::array{});
  std::string forbidden(
      op("post", "/v1/tenants").at("responses").at("403").at("description").as_string());
  EXPECT_TRUE(forbidden.starts_with("forbidden: ")) << forbidden;
}

// Routes answering in E2B's shape (ErrorStyle::e2b) document E2B's error schema.
TEST_F(OpenApi, E2bRoutesDocumentE2bErrors) {
  for (auto [method, path] : {std::pair{"post", "/v2/sandboxes"}, std::pair{"get", "/sandboxes/{id}"},
                              std::pair{"delete", "/sandboxes/{id}"}, std::pair{"post", "/sandboxes/{id}/pause"}}) {
    const json::object& o = op(method, path);
    EXPECT_EQ(o.at("tags"), json::array{"e2b"}) << path;
    const json::object& responses = o.at("responses").as_object();
    for (const char* status : {"401", "404", "429"}) {
      ASSERT_TRUE(responses.contains(status)) << method << " " << path << " " << status;
      EXPECT_EQ(json::serialize(responses.at(status).at("content").at("application/json").at("schema")),
                R"({"$ref":"#/components/schemas/E2bError"})")
          << path;
    }
  }
  EXPECT_TRUE(op("post", "/sandboxes/{id}/pause").at("responses").as_object().contains("409"));
  EXPECT_EQ(json::serialize(op("get", "/v1/sessions/{id}").at("responses").at("404").at("content").at(
                "application/json").at("schema")),
            R"({"$ref":"#/components/schemas/Error"})");
}

TEST(OpenApiGenerator, CodesSharingAStatusAreListedTogether) {
  Router router;
  RouteDoc doc{.operation_id = "thing",
               .tag = "things",
               .summary = "a thing",
               .responses = {docs::empty_response(204, "done")},
               .errors = {"forbidden", "policy_denied", "rate_limited"}};
  router.add(http::verb::post, "/v1/things/{id}", doc, [](Request&, Responder&) {});
  json::object d = openapi_document(router);
  const json::object& responses =
      d.at("paths").at("/v1/things/{id}").at("post").at("responses").as_object();
  std::string both(responses.at("403").at("description").as_string());
  EXPECT_NE(both.find("forbidden: "), std::string::npos) << both;
  EXPECT_NE(both.find("; policy_denied: "), std::string::npos) << both;
  EXPECT_TRUE(responses.at("429").at("headers").as_object().contains("Retry-After"));
  EXPECT_TRUE(responses.contains("204"));
  EXPECT_FALSE(responses.at("204").as_object().contains("content"));
  // No body documented: no 408/413; not public: 401.
  EXPECT_FALSE(responses.contains("413"));
  EXPECT_TRUE(responses.contains("401"));
  // The capture becomes a required path parameter even when the doc says nothing of it.
  const json::array& params =
      d.at("paths").at("/v1/things/{id}").at("post").at("parameters").as_array();
  ASSERT_EQ(params.size(), 1u);
  EXPECT_EQ(params[0].at("in"), "path");
  EXPECT_EQ(params[0].at("required"), true);
}

TEST_F(OpenApi, ContentTypesAndQueryParametersAreTheOnesHandlersUse) {
  auto params = [&](const std::string& method, const std::string& path) {
    std::set<std::string> names;
    if (const json::value* ps = op(method, path).if_contains("parameters"))
      for (const auto& p : ps->as_array()) names.insert(std::string(p.at("name").as_string()));
    return names;
  };
  EXPECT_EQ(params("post", "/v1/sessions"), (std::set<std::string>{"wait_s"}));
  EXPECT_EQ(params("get", "/v1/sessions"),
            (std::set<std::string>{"state", "metadata.K", "limit", "cursor"}));
  EXPECT_EQ(params("get", "/v1/sessions/{id}/execs/{eid}/output"),
            (std::set<std::string>{"id", "eid", "follow", "Last-Event-ID"}));
  EXPECT_EQ(params("post", "/v1/sessions/{id}/execs/{eid}/stdin"),
            (std::set<std::string>{"id", "eid", "close"}));
  EXPECT_EQ(params("put", "/v1/sessions/{id}/files"),
            (std::set<std::string>{"id", "path", "path_b64", "mode", "parents"}));
  EXPECT_EQ(params("delete", "/v1/sessions/{id}/files"),
            (std::set<std::string>{"id", "path", "path_b64", "recursive"}));
  EXPECT_EQ(params("get", "/v1/sessions/{id}/fs"), (std::set<std::string>{"id", "path", "path_b64", "depth"}));

  const json::object& output =
      op("get", "/v1/sessions/{id}/execs/{eid}/output").at("responses").at("200").as_object();
  EXPECT_TRUE(output.at("content").as_object().contains("text/event-stream"));
  EXPECT_TRUE(output.at("content").as_object().contains("application/json"));
  EXPECT_TRUE(op("get", "/v1/sessions/{id}/files")
                  .at("responses")
                  .at("200")
                  .at("content")
                  .as_object()
                  .contains("application/octet-stream"));
  EXPECT_TRUE(op("put", "/v1/sessions/{id}/files")
                  .at("requestBody")
                  .at("content")
                  .as_object()
                  .contains("application/octet-stream"));
  EXPECT_TRUE(op("get", "/v1/sessions/{id}/archive")
                  .at("responses")
                  .at("200")
                  .at("content")
                  .as_object()
                  .contains("application/x-tar"));
  EXPECT_TRUE(op("put", "/v1/sessions/{id}/archive")
                  .at("requestBody")
                  .at("content")
                  .as_object()
                  .contains("application/x-tar"));
  EXPECT_TRUE(op("head", "/v1/sessions/{id}/files")
                  .at("responses")
                  .at("200")
                  .at("headers")
                  .as_object()
                  .contains("X-Cela-Size"));
}

// GET over a unix socket with Connection: close; the whole answer, header and body.
std::string get_over_unix_socket(const std::string& socket_path, const std::string& target) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  socket_path.copy(addr.sun_path, sizeof(addr.sun_path) - 1);
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::string request = "GET " + target + " HTTP/1.1\r\nHost: cela\r\nConnection: close\r\n\r\n";
    if (::write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buf[65536];
      for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
        answer.append(buf, static_cast<size_t>(n));
    }
  }
  ::close(fd);
  return answer;
}

TEST_F(OpenApi, TheDaemonServesTheGeneratedDocument) {
  // A second table, started: the served answer is the document of its own router.
  auto served = test_support::DaemonRoutes::open();
  ASSERT_TRUE(served) << served.error().message();
  ASSERT_TRUE((*served)->serve());
  std::string answer = get_over_unix_socket((*served)->socket_path(), "/v1/openapi.json");
  ASSERT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer.substr(0, 200);
  auto split = answer.find("\r\n\r\n");
  ASSERT_NE(split, std::string::npos);
  EXPECT_NE(answer.substr(0, split).find("application/json"), std::string::npos);
  boost::system::error_code ec;
  json::value body = json::parse(answer.substr(split + 4), ec);
  ASSERT_FALSE(ec) << ec.message();
  // The daemon writes numbers as plain decimals (common/json_text.h): compare with
  // the document as it is written, not with its doubles.
  EXPECT_EQ(body, json::parse(cela::json_text(json::value(openapi_document((*served)->router())))));
  EXPECT_EQ(body.at("paths").as_object().size(), doc().at("paths").as_object().size());
}

// ---- the schemas accept what the code renders ----

store::SessionRecord session_record() {
  store::SessionRecord s;
  s.id = "s-0123456789abcdef";
  s.tenant_id = "t-0123456789abcdef";
  s.state = "ready";
  s.template_ref = "base@2026.11.29-2";
  s.limits = store::SessionLimits{};
  s.network = store::NetworkPolicy{};
  s.metadata = {{"user", "u-17"}};
  s.created_at = "2026-11-29T10:05:00.123Z";
  s.ready_at = "2026-11-29T10:05:00.223Z";
  s.expires_at = "2026-11-29T11:05:00.123Z";
  s.startup_ms = 100;
  return s;
}

TEST(OpenApiSchemas, E2bObjectsAsRendered) {
  api::e2b::SandboxTokens tokens(std::string(32, 't'));
  store::SessionRecord live = session_record();
  live.spec.template_name = "base";
  EXPECT_EQ(check_component(api::e2b::render_sandbox(live, tokens), "E2bSandbox"), std::vector<std::string>{});
  EXPECT_EQ(check_component(api::e2b::render_listed(live), "E2bListedSandbox"), std::vector<std::string>{});
  live.network = store::NetworkPolicy{.mode = "allowlist", .allow = {"*:*"}, .deny = {}};
  EXPECT_EQ(check_component(api::e2b::render_detail(live, tokens), "E2bSandboxDetail"), std::vector<std::string>{});
  session::SessionMetrics m;
  m.history = {{1'800'000'000'000, 10, 1 << 20, 1, 4096}};
  m.wall_ms = 5000;
  for (const auto& point : api::e2b::render_metrics(m, live.limits, 1'800'000'002'000))
    EXPECT_EQ(check_component(point, "E2bSandboxMetric"), std::vector<std::string>{});
}

TEST(OpenApiSchemas, SessionsAsRendered) {
  store::SessionRecord live = session_record();
  EXPECT_EQ(check_component(api::render(live), "Session"), std::vector<std::string>{});
  // Before init is ready (and after a failed start): nulls where the schema allows them.
  store::SessionRecord starting = session_record();
  starting.state = "starting";
  starting.ready_at.clear();
  starting.expires_at.clear();
  starting.startup_ms.reset();
  starting.metadata.clear();
  EXPECT_EQ(check_component(api::render(starting), "Session"), std::vector<std::string>{});

  store::SessionRecord ended = session_record();
  ended.state = "terminated";
  ended.termination_reason = "deleted";
  ended.termination_at = "2026-11-29T10:06:00.000Z";
  ended.termination_message = "deleted through the API";
  store::CleanupReport cleanup;
  cleanup.processes_killed = 2;
  cleanup.cgroup_removed = cleanup.mounts_removed = cleanup.upper_dir_freed = true;
  ended.cleanup = cleanup;
  EXPECT_EQ(check_component(api::render(ended), "DeletedSession"), std::vector<std::string>{});
  json::object list{{"sessions", json::array{api::render(live), api::render(ended)}},
                    {"next_cursor", nullptr}};
  EXPECT_EQ(check_component(list, "SessionList"), std::vector<std::string>{});

  // The checker is not blind: a field the renderer does not send is refused.
  json::object stray = api::render(live);
  stray["surprise"] = 1;
  EXPECT_EQ(check_component(stray, "Session").size(), 1u);
  stray = api::render(live);
  stray.erase("limits");
  EXPECT_EQ(check_component(stray, "Session").size(), 1u);
}

TEST(OpenApiSchemas, ExecsAsRendered) {
  store::ExecRecord e;
  e.id = "e-0123456789abcdef";
  e.session_id = "s-0123456789abcdef";
  e.argv = {"python3", "-c", "print(1)"};
  e.cwd = "/home/user";
  e.user = "user";
  e.started_at = "2026-11-29T10:05:00.123Z";
  EXPECT_EQ(check_component(api::render(e), "Exec"), std::vector<std::string>{});
  e.argv.clear();
  e.cmd = "echo hi";
  e.state = "exited";
  e.exit_code = 0;
  e.ended_at = "2026-11-29T10:05:01.123Z";
  e.duration_ms = 1000;
  e.cpu_ms = 3;
  e.peak_memory_bytes = 1 << 20;
  e.stdout_bytes = 3;
  json::object rec = api::render(e);
  EXPECT_EQ(check_component(rec, "Exec"), std::vector<std::string>{});
  rec["stdout"] = "hi\n";
  rec["stderr"] = "";
  EXPECT_EQ(check_component(rec, "ExecResult"), std::vector<std::string>{});
  EXPECT_EQ(check_component(api::render(e), "KillAccepted"), std::vector<std::string>{});
  EXPECT_EQ(check_component(json::object{{"id", e.id}, {"state", "running"}, {"signal", 15}},
                            "KillAccepted"),
            std::vector<std::string>{});
  EXPECT_EQ(check_component(json::object{{"id", e.id}, {"state", "running"}}, "ExecStarted"),
            std::vector<std::string>{});
}

TEST(OpenApiSchemas, TenantsAndErrorsAsRendered) {
  store::TenantRecord t{"t-0123456789abcdef", "acme", {5, 4096, 2.5}, "2026-11-29T10:05:00.123Z"};
  EXPECT_EQ(check_component(api::render(t), "Tenant"), std::vector<std::string>{});
  EXPECT_EQ(check_component(error_body(ApiError::capacity_exceeded("full", 2), "r-1"), "Error"),
            std::vector<std::string>{});
  EXPECT_EQ(
      check_component(error_body(ApiError::not_found("no session s-1").with_session("s-1"), "r-2"),
                      "Error"),
      std::vector<std::string>{});
}

}  // namespace
}  // namespace cela::api
