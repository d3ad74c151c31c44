// RouteDoc: what one route says about itself, registered with it (Router::add) so the
// OpenAPI document (openapi.h) is generated from the table that also dispatches: a
// route cannot be served without being described, nor described without being served.
//
// Schemas are JSON Schema fragments as OpenAPI 3.0 writes them (boost::json values),
// usually a reference to a shared component: route_docs.h has the helpers and the
// component table. Error answers are named by their ApiError code ("not_found"); the
// generator turns each into its status with the shared Error schema, so the code ->
// status mapping stays the one of http_error.h.
#pragma once

#include <boost/json/value.hpp>
#include <string>
#include <vector>

namespace cela::api {

// A path, query or header parameter. Path parameters are taken from the route's
// pattern; a ParamDoc with in == "path" only adds their description and schema.
struct ParamDoc {
  std::string name{};
  std::string in = "query";  // "query", "path" or "header"
  boost::json::value schema{};
  std::string description{};
  bool required = false;
};

// One representation of a request or response body.
struct ContentDoc {
  std::string media_type{};  // "application/json", "text/event-stream", ...
  boost::json::value schema{};
};

struct HeaderDoc {
  std::string name{};
  std::string description{};
  boost::json::value schema{};
};

struct ResponseDoc {
  int status = 200;
  std::string description{};
  std::vector<ContentDoc> content{};  // empty: no body (204, HEAD)
  std::vector<HeaderDoc> headers{};
};

struct RequestBodyDoc {
  std::string description{};
  std::vector<ContentDoc> content{};
  bool required = false;
};

struct RouteDoc {
  std::string operation_id{};  // unique, camelCase: "createSession"
  std::string tag{};           // the resource: "sessions", "execs", "files", "admin"...
  std::string summary{};
  std::string description{};
  std::vector<ParamDoc> params{};
  std::vector<RequestBodyDoc> body{};    // zero or one
  std::vector<ResponseDoc> responses{};  // the success answers
  // ApiError codes the handler itself can answer with. The server's own answers
  // (400 bad target, 401 without a key, 408/413 on bodies, 500, 503) are added by the
  // generator; see openapi.h.
  std::vector<std::string> errors{};
};

}  // namespace cela::api
