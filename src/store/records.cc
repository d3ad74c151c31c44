#include "store/records.h"

#include "common/random.h"


#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace cela::store {



bool is_session_state(std::string_view state) {
  return is_live_session_state(state) || state == session_state::terminated ||
         state == session_state::failed;
}

bool is_live_session_state(std::string_view state) {
  return state == session_state::starting || state == session_state::ready ||
         state == session_state::running || state == session_state::paused;
}

bool is_exec_state(std::string_view state) {
  return state == exec_state::running || state == exec_state::exited ||
         state == exec_state::killed || state == exec_state::timed_out ||
         state == exec_state::oom_killed || state == exec_state::failed;
}

std::string new_id(std::string_view prefix) { return random_id(prefix); }

}  // namespace cela::store
