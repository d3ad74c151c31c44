// `cela exec` (a command in a running session: output streamed, stdin forwarded, Ctrl-C
// ends it, exit codes as `cela run`) and `cela logs` (an exec's output, or follow it).
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

void add_exec_commands(CLI::App& app, int& exit_code);

}  // namespace cela::cli
