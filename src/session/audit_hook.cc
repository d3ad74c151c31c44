#include "session/audit_hook.h"

#include <boost/json/serialize.hpp>
#include <cstdio>

#include "common/time.h"
#include "obs/audit.h"

namespace cela::session {

// Into the daemon's hash-chained audit log (obs/audit.h); without one installed
// (`cela run`, unit tests), one line on stderr as before.
void audit_hook(std::string_view kind, std::string_view tenant_id, std::string_view session_id,
                boost::json::object fields) {
  if (obs::AuditLog* log = obs::installed_audit(); log && log->options().enabled) {
    (void)log->record(kind, {std::string(tenant_id), std::string(session_id), ""}, fields);
    return;
  }
  fields["kind"] = kind;
  fields["tenant_id"] = tenant_id;
  fields["session_id"] = session_id;
  fields["at"] = now_rfc3339();
  std::string line = "cela: audit " + boost::json::serialize(fields) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace cela::session
