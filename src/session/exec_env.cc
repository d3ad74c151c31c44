#include "session/exec_env.h"

#include <algorithm>

#include "common/nofile.h"

namespace cela::session {

Identity identity_for(const rootfs::TemplateUser& account, ExecUser user) {
  if (user == ExecUser::root) return {"root", 0, 0, "/root"};
  return {account.name, account.uid, account.gid, account.home};
}

Result<runtime::ProcessSpec> process_spec(const rootfs::TemplateUser& account, const ExecEnvInput& in) {
  if (in.argv.empty() == in.cmd.empty()) return fail(ErrorCode::invalid_argument, "give exactly one of argv and cmd");
  Identity id = identity_for(account, in.user);
  runtime::ProcessSpec p;
  p.argv = in.argv.empty() ? std::vector<std::string>{"/bin/sh", "-c", in.cmd} : in.argv;
  p.uid = id.uid;
  p.gid = id.gid;
  p.cwd = in.cwd.empty() ? id.home : in.cwd;
  p.fsize_bytes = in.fsize_bytes;
  p.nofile = nofile_grant(in.nofile);
  p.no_new_privs = !in.allow_sudo;
  p.tty = in.tty;
  p.cols = in.cols;
  p.rows = in.rows;
  p.env = {kDefaultPath, "HOME=" + id.home, "USER=" + id.name, "LOGNAME=" + id.name, "LANG=C.UTF-8", "TERM=dumb"};
  // A terminal's TERM is the exec's own choice only: the session's (meant for pipes)
  // does not apply to it.
  const std::vector<std::string> tty_term = {"TERM=xterm-256color"}, none;
  for (const auto* list : {&in.base_env, in.tty ? &tty_term : &none, &in.env}) {
    for (const auto& kv : *list) {
      auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || kv.find('\0') != std::string::npos)
        return fail(ErrorCode::invalid_argument, "bad environment entry `" + kv.substr(0, eq) + "` (want K=V)");
      std::string key = kv.substr(0, eq + 1);
      std::erase_if(p.env, [&](const std::string& e) { return e.starts_with(key); });
      p.env.push_back(kv);
    }
  }
  return p;
}

}  // namespace cela::session
