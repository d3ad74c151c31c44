// `cela shell SESSION [-- CMD...]`: an interactive terminal into a session, like
// `docker exec -it`: a tty exec (the template user's login shell by default), the local
// terminal in raw mode, keystrokes sent as they come, SIGWINCH as a resize, the
// exec's exit code as ours.
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

void add_shell_command(CLI::App& app, int& exit_code);

}  // namespace cela::cli
