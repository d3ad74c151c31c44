// Router: maps (method, decoded path segments) to a handler, with {name} captures, and
// keeps the table of routes with their documentation (RouteDoc) for the OpenAPI
// document (openapi.h), so what is served and what is described are one list.
//
//   router.add(http::verb::get, "/v1/sessions/{id}/execs/{eid}", docs::get_exec, handler);
//
// Matching is per segment: a literal segment matches itself, "{name}" matches any one
// non-empty segment and records it in Request::params; a last segment "{name...}"
// matches the rest of the path (zero or more segments, joined by '/', decoded).
// When several routes match a
// path, the most specific wins: at the first segment where they differ, a literal beats
// a capture ("/v1/templates/builtin" before "/v1/templates/{name}"). A path that
// matches some route but not with this method answers 405 (with Allow); a path that
// matches none answers 404. HEAD is not implied by GET: register it where it is wanted.
// Routes are registered before the server starts; the table
// is then read-only (and so safe to read from every io thread).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/http_error.h"
#include "api/request.h"
#include "api/route_doc.h"

namespace cela::api {

class Responder;

// Runs on an io thread: it must not block (see HttpServer::post_blocking). It answers
// through `res` now, or later from any thread by keeping res.shared_from_this().
using Handler = std::function<void(Request& req, Responder& res)>;

// RouteOptions().make_public(), RouteOptions().with_body_limit(100 << 20)...
struct RouteOptions {
  // No authentication (healthz, readyz, metrics); Request::principal stays empty.
  bool public_route = false;
  // Overrides ServerConfig::body_limit (e.g. 100 MiB for uploads).
  std::optional<std::size_t> body_limit;
  // Overrides ServerConfig::body_timeout (the whole body must arrive within it).
  std::optional<std::chrono::milliseconds> body_timeout;
  // The handler runs before the body is read and takes it through a BodySink
  // (api/body_sink.h) instead of Request::body.
  bool streamed_body = false;
  // The shape of every error this route answers, the server's own (401, 413...) too.
  ErrorStyle error_style = ErrorStyle::cela;

  RouteOptions& make_public() {
    public_route = true;
    return *this;
  }
  RouteOptions& with_body_limit(std::size_t bytes) {
    body_limit = bytes;
    return *this;
  }
  RouteOptions& with_body_timeout(std::chrono::milliseconds timeout) {
    body_timeout = timeout;
    return *this;
  }
  RouteOptions& stream_body() {
    streamed_body = true;
    return *this;
  }
  RouteOptions& with_error_style(ErrorStyle style) {
    error_style = style;
    return *this;
  }
};

struct Route {
  http::verb method;
  std::string pattern;
  Handler handler;
  RouteOptions options;
  RouteDoc doc;
  std::vector<std::string> segments;  // literal text, or "{name}" for a capture
};

struct RouteMatch {
  const Route* route = nullptr;  // null: no route for this method
  std::map<std::string, std::string, std::less<>> params;
  bool path_known = false;  // some route matches the path with another method
  std::string allow;        // "GET, DELETE" when path_known
};

class Router {
 public:
  // Aborts the process on a malformed pattern or a duplicate (method, pattern): both
  // are programming errors found at startup.
  void add(http::verb method, std::string_view pattern, RouteDoc doc, Handler handler,
           RouteOptions options = {});
  RouteMatch match(http::verb method, const std::vector<std::string>& segments) const;
  // Every route in registration order (the OpenAPI document is built from it).
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

}  // namespace cela::api
