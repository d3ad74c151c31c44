// cela_openapi_dump: prints the daemon's OpenAPI document (the one GET /v1/openapi.json
// answers) to stdout without serving anything, for the validator test (validate.mjs).
#include <boost/json/serialize.hpp>
#include <cstdio>

#include "api/openapi.h"
#include "daemon_routes.h"

int main() {
  auto routes = cela::test_support::DaemonRoutes::open();
  if (!routes) {
    std::fprintf(stderr, "cela_openapi_dump: %s\n", routes.error().message().c_str());
    return 1;
  }
  std::string doc = boost::json::serialize(cela::api::openapi_document((*routes)->router()));
  std::fwrite(doc.data(), 1, doc.size(), stdout);
  std::fputc('\n', stdout);
  return 0;
}
