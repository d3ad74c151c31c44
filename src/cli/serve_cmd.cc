#include "cli/serve_cmd.h"

#include <memory>

#include "daemon/daemon.h"

namespace cela::cli {

void add_serve_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<daemon::DaemonOptions>();
  CLI::App* cmd = app.add_subcommand("serve", "Run the cela daemon (HTTP API, sessions)");
  cmd->add_option("--config", o->config_file, "JSON config file (docs/operations.md)");
  cmd->add_option("--listen", o->listen, "TCP ADDR:PORT (default 127.0.0.1:8080; `none` disables TCP)");
  cmd->add_option("--socket", o->socket, "Unix socket path (default /run/cela/cela.sock)");
  cmd->add_option("--state-dir", o->state_dir, "State directory (default /var/lib/cela/state)");
  cmd->add_option("--max-sessions", o->max_sessions, "Host-wide session limit");
  cmd->add_flag("--dev", o->dev, "Dev mode: the dev-only `host` template, for local root on the unix socket");
  auto check = std::make_shared<bool>(false);
  cmd->add_flag("--check-config", *check, "Check the config and the options, print the effective settings, and exit");
  cmd->callback([o, check, &exit_code] { exit_code = *check ? daemon::check_config(*o) : daemon::run(*o); });
}

}  // namespace cela::cli
