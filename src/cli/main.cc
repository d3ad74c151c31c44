// The `cela` command line: one binary for the runner, the templates and (later) the
// daemon and its clients. Each subcommand registers itself from its own file.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string_view>

#include "cli/audit_cmd.h"
#include "cli/client_cmds.h"
#include "cli/key_cmd.h"
#include "cli/run_cmd.h"
#include "cli/serve_cmd.h"
#include "cli/template_cmd.h"
#include "runtime/outcome.h"
#include "session/upload.h"
#include "session/watch.h"

int main(int argc, char** argv) {
  // An archive import on a session's behalf, started by the daemon (session/upload.h).
  if (argc >= 2 && std::string_view(argv[1]) == cela::session::kTarImportCommand) cela::session::tar_import_main(argc, argv);
  // A directory watch inside a session, started by the daemon (session/watch.h).
  if (argc >= 2 && std::string_view(argv[1]) == cela::session::kWatchCommand) cela::session::watch_main(argc, argv);
  CLI::App app{"cela: a sandbox for running untrusted, AI-generated code"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "cela 0.1.0");
  int exit_code = 0;
  cela::cli::add_run_command(app, exit_code);
  cela::cli::add_template_commands(app, exit_code);
  cela::cli::add_serve_command(app, exit_code);
  cela::cli::add_client_commands(app, exit_code);
  cela::cli::add_audit_commands(app, exit_code);
  cela::cli::add_key_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "cela: %s (see --help)\n", e.what());
    return cela::runtime::kExitUsage;
  }
  return exit_code;
}
