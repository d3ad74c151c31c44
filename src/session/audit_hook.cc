#include "session/audit_hook.h"

#include <boost/json/serialize.hpp>
#include <cstdio>

#include "common/time.h"

namespace cela::session {

void audit_hook(std::string_view kind, std::string_view tenant_id, std::string_view session_id,
                boost::json::object fields) {
  fields["kind"] = kind;
  fields["tenant_id"] = tenant_id;
  fields["session_id"] = session_id;
  fields["at"] = now_rfc3339();
  std::string line = "cela: audit " + boost::json::serialize(fields) + "\n";
  std::fputs(line.c_str(), stderr);
}

}  // namespace cela::session
