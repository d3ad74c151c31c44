// The file policy of a session applied to its file views (API.md "File policy"), and
// the record of every export.
#include <boost/json/object.hpp>

#include "session/audit_hook.h"
#include "session/file_policy.h"
#include "session/manager.h"

namespace cela::session {

void SessionManager::apply_file_policy(SessionFs& fs, const FsView& view) const {
  // A sandbox user that is root inside may write anywhere its root could.
  fs.respect_owner_permissions(view.inside_uid != 0);
  SessionFs::ExportFilter filter;
  auto r = view.redactions;
  if (r && !r->empty() && view.files.scan_secrets != SecretScan::off) {
    bool refuse = view.files.scan_secrets == SecretScan::refuse;
    filter = [r, refuse](std::string_view path, std::string data) -> Result<std::string> {
      if (!r->contains(data)) return data;
      if (refuse)
        return fail(ErrorCode::policy_denied,
                    "export refused: " + std::string(path) + " holds a granted secret (files.scan_secrets: refuse)");
      return r->redact(data);
    };
  }
  fs.set_export_policy(policy_roots(view.files.exportable), std::move(filter));
}

void SessionManager::record_export(const Caller& caller, const std::string& session_id, std::string_view kind,
                                   std::string_view path, uint64_t size, std::string_view sha256) {
  audit_hook("file.exported", caller.tenant_id, session_id,
             {{"export", kind}, {"path", path}, {"size", size}, {"sha256", sha256}});
}

}  // namespace cela::session
