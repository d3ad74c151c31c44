// `cela template build|ls|show`: building and inspecting the template store.
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

// Registers the `template` subcommand and its `build`, `ls` and `show` children; their
// callbacks store the process exit code in `exit_code` (0 ok, 1 failed, 2 unknown
// template).
void add_template_commands(CLI::App& app, int& exit_code);

}  // namespace cela::cli
