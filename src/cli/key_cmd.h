// `cela key create`: a new API key of a tenant, from a running `cela serve` (over its
// unix socket as local root, or TCP with an admin key), printed once.
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

void add_key_commands(CLI::App& app, int& exit_code);

}  // namespace cela::cli
