// The OpenAPI documentation of E2B's control plane (tag "e2b"): one RouteDoc per route
// of control.cc, and E2B's object schemas for the document's components.
#pragma once

#include <boost/json/object.hpp>

#include "api/route_doc.h"

namespace cela::api::e2b::docs {

extern const RouteDoc create_sandbox_v2, create_sandbox;
extern const RouteDoc list_sandboxes_v2, list_sandboxes;
extern const RouteDoc get_sandbox, kill_sandbox, set_sandbox_timeout, pause_sandbox;
extern const RouteDoc connect_sandbox_v2, connect_sandbox, resume_sandbox;
extern const RouteDoc sandbox_metrics;

// E2B's schemas (E2bError, E2bNewSandbox, E2bSandbox, ...), merged into the
// document's components by component_schemas().
boost::json::object schemas();

}  // namespace cela::api::e2b::docs
