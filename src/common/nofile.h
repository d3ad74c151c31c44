// RLIMIT_NOFILE of this process: what `cela serve` raises at start, what connection
// budgets are derived from, and the ceiling of every exec's NOFILE (a sandbox process
// inherits its init's hard limit, which it inherited from the daemon, and cannot raise
// it: that needs CAP_SYS_RESOURCE in the host's user namespace).
#pragma once

#include <cstdint>

#include "common/error.h"

namespace cela {

struct NofileLimit {
  std::uint64_t soft = 0;
  std::uint64_t hard = 0;  // an unlimited hard limit reads as fs.nr_open
};

NofileLimit nofile_limit();
// Lifts the soft limit to the hard one; returns the limits now in force.
Result<NofileLimit> raise_nofile_limit();
// What an exec asking for `wanted` descriptors gets: at most this process's hard limit.
std::uint64_t nofile_grant(std::uint64_t wanted);

}  // namespace cela
