// How a process ended, classified the same way for every backend and for `cela run`:
// state, exit code, signal and a one-line reason naming the limit that was hit. The
// jail's classifier serves as the one implementation (jail/result.h).
#pragma once

#include "jail/result.h"

namespace cela::runtime {

using RunState = jail::RunState;
using RunObservation = jail::RunObservation;
using RunResult = jail::RunResult;
using jail::classify;
using jail::exit_code_for;
using jail::to_string;

inline constexpr int kExitUsage = jail::kExitUsage;
inline constexpr int kExitFailed = jail::kExitFailed;
inline constexpr int kExitCannotExec = jail::kExitCannotExec;
inline constexpr int kExitNotFound = jail::kExitNotFound;

}  // namespace cela::runtime
