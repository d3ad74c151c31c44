// JSON request bodies of the session and exec routes -> the session layer's typed
// specs (session/types.h). Strict: unknown fields, wrong types and out-of-range
// values are invalid_argument naming the field; features that do not exist yet
// (network allowlists, package gateway, secrets, volumes) are policy_denied rather
// than silently ignored.
#pragma once

#include <boost/json/object.hpp>

#include "common/error.h"
#include "session/config.h"
#include "session/types.h"

namespace cela::api {

Result<session::CreateSessionSpec> parse_create_session(const boost::json::object& body,
                                                           const session::DaemonConfig& config);
Result<session::ExecSpec> parse_exec(const boost::json::object& body, const session::DaemonConfig& config);
Result<session::KillSpec> parse_kill(const boost::json::object& body);
// POST …/execs/{eid}/resize: {cols, rows}, each 1..1000.
Result<std::pair<uint16_t, uint16_t>> parse_resize(const boost::json::object& body);
Result<session::PatchSpec> parse_patch(const boost::json::object& body);

}  // namespace cela::api
