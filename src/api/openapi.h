// The OpenAPI 3 description served at GET /v1/openapi.json, built from one table of
// the routes so the document and the server cannot drift apart silently: the route
// table test checks every registered route appears here.
#pragma once

#include <boost/json/object.hpp>
#include <string>
#include <vector>

namespace cela::api {

struct ApiOperation {
  const char* method;  // lower case
  const char* path;    // OpenAPI form: /v1/sessions/{id}
  const char* summary;
  int status;          // success status
};

const std::vector<ApiOperation>& api_operations();
boost::json::object openapi_document();

}  // namespace cela::api
