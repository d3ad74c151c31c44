// The audit entry point of the session layer for secret grants, their expiry and file
// exports, until obs/'s audit (issue 10, "Audit") lands on main: then this forwards to
// it. Today it writes one JSON line per event to the daemon's log (stderr), prefixed
// "cela: audit ". Values are never passed here, only names, paths, sizes and hashes.
#pragma once

#include <boost/json/object.hpp>
#include <string_view>

namespace cela::session {

void audit_hook(std::string_view kind, std::string_view tenant_id, std::string_view session_id,
                boost::json::object fields);

}  // namespace cela::session
