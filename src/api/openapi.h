// The OpenAPI 3.0 document served at GET /v1/openapi.json, generated from the
// router's table: every registered (method, pattern) becomes an operation built from
// the RouteDoc it was registered with (route_doc.h), its schemas from the shared
// components (route_docs.h). Nothing is listed by hand, so the document cannot miss a
// route; tests/unit/openapi_test.cc checks both directions and that every route is
// really described, and tests/openapi/ runs a real OpenAPI validator over it.
//
// Errors: each operation lists, per status, the ApiError codes it can answer with
// (API.md "Errors", all with the Error schema): the codes its RouteDoc names plus the
// server's own answers: invalid_request (bad target or query), unauthorized (unless
// public), payload_too_large and request_timeout (routes that take a body),
// rate_limited (connections per client, requests in flight per key), internal,
// capacity_exceeded (connection or descriptor limit).
#pragma once

#include <boost/json/object.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/router.h"

namespace cela::api {

boost::json::object openapi_document(const Router& router);

// The ApiError codes a RouteDoc may name (those of http_error.h), and the codes an
// operation of `route` is documented with (its own plus the server's).
bool is_error_code(std::string_view code);
std::vector<std::string> documented_error_codes(const Route& route);

// "get", "delete"...: the OpenAPI operation key of an HTTP method.
std::string openapi_method(http::verb method);
// The document's path of a route pattern: a tail capture {name...} is written {name}
// (OpenAPI has no multi-segment parameter).
std::string openapi_path(std::string_view pattern);

}  // namespace cela::api
