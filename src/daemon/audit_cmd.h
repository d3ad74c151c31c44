// `cela audit verify` and `cela audit export`: the audit log read straight from the
// state store (the daemon may be running: SQLite's WAL lets a reader in).
#pragma once

#include <string>

namespace cela::daemon {

struct AuditCommandOptions {
  std::string state_dir = "/var/lib/cela/state";
  std::string config_file;  // its state_dir, when --state-dir is not given
  std::string session_id, kind, since;  // export filters
};

// Checks the hash chain from its anchor: 0 when it holds, 1 when a record was
// removed, edited or reordered (each break printed), 2 when the store cannot be read.
int verify_audit(const AuditCommandOptions& options);
// Every matching record as one JSON line on stdout, oldest first.
int export_audit(const AuditCommandOptions& options);

}  // namespace cela::daemon
