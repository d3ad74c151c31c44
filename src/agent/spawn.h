// Starting one exec inside the sandbox, from init's state to the exec's: join the
// exec's cgroups, leave init's OOM protection, new session, stdio pipes (or, for a
// tty exec, a pty of the sandbox's devpts as controlling terminal), rlimits, ids
// (the bounding set is init's, lowered once: prepare_init_for_execs), the exec's own
// capabilities, then, with nothing more than the exec will hold, chdir and execve along
// the exec's own PATH. Runs in init (single-threaded,
// pid 1 of the sandbox), under init's seccomp policy, which the child inherits.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "agent/protocol.h"
#include "common/fd.h"

namespace cela::agent {

// A started exec: its pid (in the sandbox's pid namespace) and init's ends of its
// stdio pipes, to be passed to the host (a tty exec: the pty master twice, then an
// empty pipe for stderr).
struct Spawned {
  pid_t pid = -1;
  UniqueFd stdin_w, stdout_r, stderr_r;
};

// Why an exec did not start: the step and its errno.
struct SpawnFailure {
  ExecStep step = ExecStep::unknown;
  int err = 0;
};

// Starts `req`. `cgroup_fds` are the exec's cgroup attach files (written "0" by the
// child before anything else); may be empty. Returns once the child has called
// execve (or failed: then it has been reaped).
std::expected<Spawned, SpawnFailure> spawn_exec(const ExecRequest& req,
                                                const std::vector<UniqueFd>& cgroup_fds);

// Once in init, before its first exec: what every exec inherits from it instead of
// setting up itself: default signal dispositions (init ignores only SIGPIPE, which
// each exec resets) and the capability bounding set of kept_capabilities() with an
// empty ambient set. Returns 0 or an errno.
int prepare_init_for_execs();

// The execve paths tried for `req`, in order: argv[0] itself when it has a slash,
// else each directory of the exec's own PATH (not init's environment).
std::vector<std::string> exec_candidates(const ExecRequest& req);

}  // namespace cela::agent
