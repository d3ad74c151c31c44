// `cela run`: one command in a fresh sandbox, output streamed, structured result.
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

// Registers the `run` subcommand; its callback stores the process exit code in
// `exit_code`.
void add_run_command(CLI::App& app, int& exit_code);

}  // namespace cela::cli
