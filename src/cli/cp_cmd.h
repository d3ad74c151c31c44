// `cela cp`: one file between a session and the local machine.
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

void add_cp_command(CLI::App& app, int& exit_code);

}  // namespace cela::cli
