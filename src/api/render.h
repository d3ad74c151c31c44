// render(): the API.md JSON of a session, exec or tenant record.
//   session: id, state, template, limits, network, created_at, ready_at, expires_at,
//            metadata, termination ({reason, at, message} or null), startup_ms; plus
//            cleanup when there is a report.
//   exec:    id, session_id, argv|cmd, cwd, user, state, exit_code, signal, reason,
//            started_at, ended_at, duration_ms, cpu_ms, peak_memory_bytes, pids_peak,
//            stdout_bytes, stderr_bytes, output_truncated, partial.
//   tenant:  id, name, quotas, created_at.
// Unset text fields render as null. Numbers are written by common/json_text.h.
#pragma once

#include <boost/json/object.hpp>
#include <string_view>

#include "session/types.h"

namespace cela::api {

boost::json::object render(const session::SessionLimits& limits);
boost::json::object render(const session::SessionRecord& session);
boost::json::object render(const session::ExecRecord& exec);
boost::json::object render(const session::TenantRecord& tenant);
boost::json::object render(const session::PackageInstallRecord& install);

// A file name or path as API.md wants it: o[key] is the text; when `bytes` are not
// UTF-8, o[key] is their display form (U+FFFD for each bad byte) and o[key + "_b64"]
// carries the exact bytes in base64. The sibling is absent for UTF-8 names.
void set_name_field(boost::json::object& o, std::string_view key, std::string_view bytes);

}  // namespace cela::api
