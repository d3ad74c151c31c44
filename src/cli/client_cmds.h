// The client subcommands: `cela session ...`, `cela exec`, `cela logs`, `cela cp`,
// talking to a running `cela serve` over its unix socket or TCP (--url, --api-key;
// CELA_URL, CELA_API_KEY).
#pragma once

#include <CLI/CLI.hpp>

namespace cela::cli {

void add_client_commands(CLI::App& app, int& exit_code);

}  // namespace cela::cli
