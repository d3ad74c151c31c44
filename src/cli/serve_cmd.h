// `cela serve`: the daemon (HTTP API on a unix socket and TCP, sessions, state).
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

void add_serve_command(CLI::App& app, int& exit_code);

}  // namespace cela::cli
