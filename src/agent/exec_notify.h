// The execve/execveat watch of a session (docs/security.md "Process audit"): init
// installs, before its first exec, a seccomp filter that turns every execve and
// execveat of its descendants into a user notification, and hands the listener to
// the host. Every other syscall passes this filter untouched (the exec's own policy
// filter, stacked later, still decides them); precedence makes the policy's
// KILL/ERRNO verdicts win over the notification.
#pragma once

#include "common/error.h"
#include "common/fd.h"

namespace cela::agent {

// Installs the filter on the calling thread and returns its listener (close-on-exec).
// Needs CAP_SYS_ADMIN in the current user namespace or no_new_privs (init has the
// former and must not set the latter: execs may use sudo).
Result<UniqueFd> install_exec_notify_filter();

}  // namespace cela::agent
