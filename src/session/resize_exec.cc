// MERGE: replaced by the pty branch's resize_exec
// resize_exec before PTY execs exist: every exec is a pipe exec, so a resize finds the
// exec (tenant scoping as for every exec call) and answers that it is not a terminal.
#include "session/manager.h"
#include "session/state.h"

namespace cela::session {

void SessionManager::resize_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                                 uint16_t cols, uint16_t rows, Done<void> done) {
  on_reactor([=, this, done = std::move(done)] {
    assert_on_reactor();
    (void)cols;
    (void)rows;
    auto found = find_exec(caller, session_id, exec_id);
    if (!found) {
      auto rec = store_.get_exec(caller.tenant_id, session_id, exec_id);
      if (!rec) return done(fail(ErrorCode::not_found, "no exec " + exec_id + " in session " + session_id));
    }
    done(fail(ErrorCode::conflict, "exec is not a terminal"));
  });
}

}  // namespace cela::session
