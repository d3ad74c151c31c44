// OpenAPI documentation of the process and port routes (routes_processes.cc).
#include "api/route_docs.h"

namespace cela::api::docs {
namespace json = boost::json;

namespace {
ParamDoc sid() { return path_param("id", "session id"); }
json::value process() {
  return object_schema({{"pid", integer_schema("as seen inside the sandbox (its init is 1)")},
                        {"ppid", integer_schema("inside; 0 for init")},
                        {"user", string_schema("root, the template's user (user), or the uid inside")},
                        {"cmd", string_schema("the command line (granted secrets redacted)")},
                        {"exec_id", nullable(string_schema("the exec whose cgroup holds it; null for init"))}},
                       {"pid", "ppid", "user", "cmd", "exec_id"});
}
}  // namespace

const RouteDoc list_processes{
    .operation_id = "listProcesses",
    .tag = "execs",
    .summary = "The session's processes as the sandbox sees them, with the exec each belongs to",
    .description = "Read from the session's cgroup tree: every process of its pid namespace, none of the "
                   "daemon's helpers. A pid here is the one `…/processes/{pid}/signal` takes.",
    .params = {sid()},
    .responses = {json_response(200, "the processes, by pid",
                                object_schema({{"processes", array_of(process())}}, {"processes"}))},
    .errors = {"not_found", "gone", "conflict"},
};

const RouteDoc signal_process{
    .operation_id = "signalProcess",
    .tag = "execs",
    .summary = "Send a signal to one process of the session (pid as seen inside)",
    .description = "The pid is resolved inside the session's pid namespace and pinned with a pidfd before the "
                   "signal goes out. Init (pid 1) is refused 403; a pid that is not the session's is 404.",
    .params = {sid(), path_param("pid", "a pid inside the sandbox")},
    .body = {json_body(object_schema({{"signal", json::object{{"oneOf",
                                                               json::array{enum_schema({"TERM", "KILL", "INT", "HUP",
                                                                                        "QUIT", "STOP", "CONT", "USR1",
                                                                                        "USR2"}),
                                                                           bounded(integer_schema(), 1, 64)}}}}},
                                     {"signal"}),
                       true)},
    .responses = {empty_response(204, "sent")},
    .errors = {"not_found", "gone", "conflict", "forbidden"},
};

RouteDoc port_proxy(std::string_view method) {
  std::string m(method);
  std::string op = "proxyPort";
  op += static_cast<char>(m[0]);
  for (size_t i = 1; i < m.size(); ++i) op += static_cast<char>(std::tolower(static_cast<unsigned char>(m[i])));
  RouteDoc doc{
      .operation_id = op,
      .tag = "ports",
      .summary = "HTTP (and WebSocket upgrades) proxied to 127.0.0.1:{port} inside the session",
      .description =
          "The request goes to the server the session's code runs on that port, with the path after "
          "/ports/{port} and the query as sent; the answer comes back as the server gave it, streamed both "
          "ways. Authorization is not forwarded; Host is 127.0.0.1:{port} (the original in "
          "X-Forwarded-Host, this prefix in X-Forwarded-Prefix). Nothing listening: 502 bad_gateway. Past "
          "the daemon's ports.max_connections open at once for the session: 429.",
      .params = {sid(), path_param("port", "1..65535"), path_param("path", "the rest of the path (may be empty)")},
      .body = {},
      .responses = {ResponseDoc{200, "whatever the session's server answers (any status)", {}, {}}},
      .errors = {"not_found", "gone", "conflict", "forbidden", "bad_gateway", "rate_limited"},
  };
  if (method != "GET" && method != "HEAD" && method != "OPTIONS")
    doc.body = {raw_body("application/octet-stream", "passed through as sent")};
  return doc;
}

}  // namespace cela::api::docs
