// `cela serve`: runs the daemon until SIGTERM or SIGINT; SIGHUP reloads the config
// file (daemon/reload.h).
#pragma once

#include <cstdint>
#include <string>

namespace cela::daemon {

// Command-line overrides of the config file (empty / 0: not given).
struct DaemonOptions {
  std::string config_file, listen, socket, state_dir;
  int64_t max_sessions = 0;
  bool dev = false;  // --dev: dev mode on whatever the config says
};

// The process exit code: 0 after a clean stop, 1 on a start failure, 2 on bad
// configuration.
int run(const DaemonOptions& options);

// `cela serve --check-config`: reads the config and the overrides as run() would, checks
// what can be checked without starting (the listen address, the files it names),
// prints the effective settings that matter most, and answers 0, or 2 with the reason.
// Needs no root and touches nothing.
int check_config(const DaemonOptions& options);

}  // namespace cela::daemon
