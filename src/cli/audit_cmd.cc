#include "cli/audit_cmd.h"

#include <memory>

#include "daemon/audit_cmd.h"

namespace cela::cli {

void add_audit_commands(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<daemon::AuditCommandOptions>();
  CLI::App* audit = app.add_subcommand("audit", "The daemon's hash-chained audit log");
  audit->require_subcommand(1);
  auto common = [o](CLI::App* cmd) {
    cmd->add_option("--state-dir", o->state_dir, "State directory (default /var/lib/cela/state)");
    cmd->add_option("--config", o->config_file, "The daemon's config file (for its state_dir)");
  };
  CLI::App* verify = audit->add_subcommand("verify", "Check the hash chain: exit 1 on a removed, edited or reordered record");
  common(verify);
  verify->callback([o, &exit_code] { exit_code = daemon::verify_audit(*o); });
  CLI::App* exp = audit->add_subcommand("export", "Print records as JSON lines, oldest first");
  common(exp);
  exp->add_option("--session", o->session_id, "Only this session's records");
  exp->add_option("--kind", o->kind, "A kind, or a prefix ending in '.'");
  exp->add_option("--since", o->since, "RFC 3339: records at or after");
  exp->callback([o, &exit_code] { exit_code = daemon::export_audit(*o); });
}

}  // namespace cela::cli
