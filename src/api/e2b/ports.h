// E2B's data plane to a sandbox's ports other than envd's (ports.cc).
#pragma once

#include "api/e2b/e2b.h"

namespace cela::api::e2b {

// "/{port}/{path...}" in the sandbox table, every method: the session's port proxy.
void add_port_routes(E2bContext& ctx);

}  // namespace cela::api::e2b
