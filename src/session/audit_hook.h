// The audit entry point of the session layer for secret grants, their expiry and file
// exports: it forwards to obs/'s hash-chained audit log (obs::audit); without one
// installed it writes one JSON line per event to stderr, prefixed "cela: audit ".
// Values are never passed here, only names, paths, sizes and hashes.
#pragma once

#include <boost/json/object.hpp>
#include <string_view>

namespace cela::session {

void audit_hook(std::string_view kind, std::string_view tenant_id, std::string_view session_id,
                boost::json::object fields);

}  // namespace cela::session
