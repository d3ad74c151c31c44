// The signals a foreground `cela` command turns into a clean stop of what it runs
// (SIGINT, SIGTERM, SIGHUP, SIGQUIT): blocked, then read from a signalfd. Call before
// any thread or child exists, so neither runs our dispositions. SIGPIPE is ignored:
// a vanished reader is an error return, not a death.
#pragma once

#include "common/fd.h"

namespace cela::cli {

UniqueFd block_stop_signals();

}  // namespace cela::cli
