// `cela audit verify|export`: the daemon's audit log, from its state directory.
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

void add_audit_commands(CLI::App& app, int& exit_code);

}  // namespace cela::cli
