// `cela cp`: files and directory trees between a session and the local machine, with
// the destination rules of `cp -r` and `docker cp` (docs/cli.md states them).
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

void add_cp_command(CLI::App& app, int& exit_code);

}  // namespace cela::cli
