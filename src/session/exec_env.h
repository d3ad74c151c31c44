// exec_env: the one place that turns "run this, as this user, here" into a process
// spec (argv, identity, environment, cwd, privilege), for daemon sessions and for
// `cela run` alike. The identity comes from the template's manifest.
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "rootfs/template.h"
#include "runtime/runtime.h"
#include "session/types.h"

namespace cela::session {

inline constexpr const char* kDefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

struct ExecEnvInput {
  std::vector<std::string> argv;      // or:
  std::string cmd;                    // a shell line, run by /bin/sh -c
  ExecUser user = ExecUser::user;
  std::string cwd;                    // "" = the user's home
  std::vector<std::string> base_env;  // "K=V" (the session's), over the defaults
  std::vector<std::string> env;       // "K=V" (the exec's), over base_env
  bool allow_sudo = false;            // no_new_privs off (setuid sudo works)
  uint64_t fsize_bytes = 0;
  uint64_t nofile = 4096;  // RLIMIT_NOFILE asked for; granted at most this process's hard limit
  bool tty = false;        // on a pty of cols x rows (runtime::ProcessSpec::tty)
  uint16_t cols = 80, rows = 24;
};

// The user an exec runs as: the template's account, or root.
struct Identity {
  std::string name;
  uint32_t uid = 0, gid = 0;
  std::string home;
};
Identity identity_for(const rootfs::TemplateUser& account, ExecUser user);

// RLIMIT_NOFILE is min(in.nofile, this process's hard limit): the sandbox's init
// inherited that hard limit and cannot raise it, so asking for more would only fail the
// exec (common/nofile.h).
// The environment is clean: PATH, HOME, USER, LOGNAME, LANG=C.UTF-8, TERM=dumb, then
// base_env, then (tty) TERM=xterm-256color, then env (a later K replaces an earlier one). invalid_argument for a
// malformed "K=V".
Result<runtime::ProcessSpec> process_spec(const rootfs::TemplateUser& account, const ExecEnvInput& in);

// Whether execs of a session may use sudo: the request when given, else the template.
inline bool sudo_allowed(const rootfs::Template& t, std::optional<bool> requested) {
  return requested.value_or(t.allow_sudo);
}

}  // namespace cela::session
