#include "agent/spawn.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "agent/caps.h"

namespace cela::agent {
namespace {

// The step an exec failed at (agent::ExecStep) and its errno, written by the child to
// a CLOEXEC pipe; EOF instead means execve succeeded.
struct ExecFailure {
  int step;  // static_cast<int>(ExecStep), -1 for none
  int err;
};
constexpr int kStepCgroup = static_cast<int>(ExecStep::cgroup), kStepSetsid = static_cast<int>(ExecStep::setsid),
              kStepStdio = static_cast<int>(ExecStep::stdio), kStepRlimit = static_cast<int>(ExecStep::rlimit),
              kStepCaps = static_cast<int>(ExecStep::caps), kStepIds = static_cast<int>(ExecStep::ids),
              kStepChdir = static_cast<int>(ExecStep::chdir), kStepNoNewPrivs = static_cast<int>(ExecStep::no_new_privs),
              kStepSeccomp = static_cast<int>(ExecStep::seccomp), kStepExecve = static_cast<int>(ExecStep::execve);

[[noreturn]] void exec_failed(int report_fd, int step, int err) {
  ExecFailure f{step, err};
  (void)!::write(report_fd, &f, sizeof f);
  ::_exit(err == ENOENT ? 127 : 126);
}

std::string env_value(const std::vector<std::string>& env, std::string_view key) {
  for (const auto& kv : env)
    if (kv.size() > key.size() && kv.compare(0, key.size(), key) == 0 && kv[key.size()] == '=')
      return kv.substr(key.size() + 1);
  return {};
}

// Everything the exec child needs, prepared by init before the child exists: the
// child shares init's memory (CLONE_VM) and must not allocate.
struct PreparedExec {
  const ExecRequest* req = nullptr;
  const SeccompProgram* seccomp = nullptr;
  std::vector<std::string> candidates;  // execve paths to try, in PATH order
  std::vector<char*> argv, envp;
  std::vector<int> cgroup_fds;  // `tasks`/`cgroup.procs` files of the exec's cgroups
  int pipes[3][2];
  int report_fd = -1;
};

}  // namespace

std::vector<std::string> exec_candidates(const ExecRequest& req) {
  const std::string& name = req.argv[0];
  if (name.find('/') != std::string::npos) return {name};
  std::string path = env_value(req.env, "PATH");
  if (path.empty()) path = "/usr/local/bin:/usr/bin:/bin";
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    std::string dir = path.substr(start, end - start);
    out.push_back((dir.empty() ? "." : dir) + "/" + name);
    start = end + 1;
  }
  return out;
}

namespace {

constexpr size_t kExecStackBytes = 256 * 1024;

// The exec child's stack, reused: vfork semantics mean one child runs at a time.
char* exec_stack_top() {
  static void* stack = ::mmap(nullptr, kExecStackBytes, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  return stack == MAP_FAILED ? nullptr : static_cast<char*>(stack) + kExecStackBytes;
}

const std::vector<int> kNoCaps;
const std::vector<int> kSeccompLoaderCaps{CAP_SYS_ADMIN};

// The exec child: from init's state to the exec's. Order matters: join the exec's
// cgroups first (before the child does anything), ids after the bounding set (needs
// CAP_SETPCAP), seccomp last before execve. Runs on its own stack in init's memory
// (vfork semantics: init is suspended until execve or _exit), so: no allocation.
int exec_child(void* arg) {
  const PreparedExec& p = *static_cast<PreparedExec*>(arg);
  const ExecRequest& req = *p.req;
  int report_fd = p.report_fd;
  // Default dispositions before unmasking: execve keeps *ignored* signals ignored, and
  // the daemon (or the shell that started it) ignores SIGPIPE, sometimes SIGINT and
  // SIGQUIT. Without this, `yes | head -c1` complains about a broken pipe and a
  // forwarded SIGINT does nothing. (No CLONE_SIGHAND: this changes the child only.)
  // The raw syscall: glibc's sigaction refuses its reserved real-time signals (32,
  // 33), which an ignoring parent leaves ignored too.
  struct {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
  } dfl{SIG_DFL, 0, nullptr, 0};
  for (int sig = 1; sig <= 64; ++sig) (void)::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int fd : p.cgroup_fds)
    if (::write(fd, "0", 1) != 1) exec_failed(report_fd, kStepCgroup, errno);
  if (::setsid() < 0) exec_failed(report_fd, kStepSetsid, errno);
  // stdio first: every pipe end is >= 3 (init's 0-2 are /dev/null), so filling 0-2
  // clobbers nothing still needed; only then may fd 3 be overwritten by the report fd.
  if (::dup2(p.pipes[0][0], 0) < 0 || ::dup2(p.pipes[1][1], 1) < 0 || ::dup2(p.pipes[2][1], 2) < 0)
    exec_failed(report_fd, kStepStdio, errno);
  if (::dup2(report_fd, 3) < 0 || ::fcntl(3, F_SETFD, FD_CLOEXEC) < 0) exec_failed(report_fd, kStepStdio, errno);
  report_fd = 3;
  ::syscall(SYS_close_range, 4, ~0U, 0);

  rlimit core{0, 0};
  // Never above the hard limit this init inherited from the daemon: raising it needs
  // CAP_SYS_RESOURCE in the host's user namespace, so asking for more fails the exec.
  rlimit inherited{};
  rlim_t granted = req.nofile;
  if (::getrlimit(RLIMIT_NOFILE, &inherited) == 0 && inherited.rlim_max < granted) granted = inherited.rlim_max;
  rlimit nofile{granted, granted};
  rlimit fsize{req.fsize_bytes ? req.fsize_bytes : RLIM_INFINITY, req.fsize_bytes ? req.fsize_bytes : RLIM_INFINITY};
  rlimit stack{8u << 20, RLIM_INFINITY};
  if (::setrlimit(RLIMIT_CORE, &core) || ::setrlimit(RLIMIT_NOFILE, &nofile) || ::setrlimit(RLIMIT_FSIZE, &fsize) ||
      ::setrlimit(RLIMIT_STACK, &stack))
    exec_failed(report_fd, kStepRlimit, errno);

  if (int err = drop_bounding_set()) exec_failed(report_fd, kStepCaps, err);
  // Keep the permitted set across the uid switch only so seccomp can be loaded
  // without no_new_privs (allow_sudo); execve of a non-root program clears it.
  if (req.uid != 0 && ::prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) exec_failed(report_fd, kStepCaps, errno);
  gid_t gid = req.gid;
  if (::setgroups(1, &gid) != 0 || ::setresgid(req.gid, req.gid, req.gid) != 0 ||
      ::setresuid(req.uid, req.uid, req.uid) != 0)
    exec_failed(report_fd, kStepIds, errno);
  if (::chdir(req.cwd.c_str()) != 0) exec_failed(report_fd, kStepChdir, errno);
  if (req.no_new_privs) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) exec_failed(report_fd, kStepNoNewPrivs, errno);
    if (req.uid != 0)
      if (int err = set_capabilities(kNoCaps)) exec_failed(report_fd, kStepCaps, err);
  } else if (req.uid != 0) {
    if (int err = set_capabilities(kSeccompLoaderCaps)) exec_failed(report_fd, kStepCaps, err);
  }

  // Last step before execve: from here on only the allowlisted syscalls exist.
  if (int err = install_seccomp(*p.seccomp)) exec_failed(report_fd, kStepSeccomp, err);
  int saved = ENOENT;
  for (const auto& candidate : p.candidates) {
    ::execve(candidate.c_str(), p.argv.data(), p.envp.data());
    if (errno == EACCES) saved = EACCES;
    else if (errno != ENOENT && errno != ENOTDIR) exec_failed(report_fd, kStepExecve, errno);
  }
  exec_failed(report_fd, kStepExecve, saved);
}

}  // namespace

std::expected<Spawned, SpawnFailure> spawn_exec(const ExecRequest& req, const SeccompProgram& seccomp,
                                                const std::vector<UniqueFd>& cgroup_fds) {
  int pipes[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}};
  int report[2] = {-1, -1};
  if (::pipe2(pipes[0], O_CLOEXEC) || ::pipe2(pipes[1], O_CLOEXEC) || ::pipe2(pipes[2], O_CLOEXEC) ||
      ::pipe2(report, O_CLOEXEC)) {
    int err = errno;
    for (int fd : {pipes[0][0], pipes[0][1], pipes[1][0], pipes[1][1], pipes[2][0], pipes[2][1], report[0], report[1]})
      if (fd >= 0) ::close(fd);
    return std::unexpected(SpawnFailure{ExecStep::pipe, err});
  }
  PreparedExec prep;
  prep.req = &req;
  prep.seccomp = &seccomp;
  prep.candidates = exec_candidates(req);
  for (auto& a : req.argv) prep.argv.push_back(const_cast<char*>(a.c_str()));
  prep.argv.push_back(nullptr);
  for (auto& e : req.env) prep.envp.push_back(const_cast<char*>(e.c_str()));
  prep.envp.push_back(nullptr);
  for (auto& fd : cgroup_fds) prep.cgroup_fds.push_back(fd.get());
  std::memcpy(prep.pipes, pipes, sizeof pipes);
  prep.report_fd = report[1];
  // CLONE_VM|CLONE_VFORK (what posix_spawn does): no copy of init's page tables,
  // and init resumes only once the child has called execve or exited.
  pid_t pid = ::clone(exec_child, exec_stack_top(), CLONE_VM | CLONE_VFORK | SIGCHLD, &prep);
  int clone_errno = errno;
  ::close(report[1]);
  ::close(pipes[0][0]);
  ::close(pipes[1][1]);
  ::close(pipes[2][1]);
  Spawned spawned{pid, UniqueFd(pipes[0][1]), UniqueFd(pipes[1][0]), UniqueFd(pipes[2][0])};
  ExecFailure failure{-1, 0};
  if (pid > 0) {
    ssize_t n;
    do n = ::read(report[0], &failure, sizeof failure);
    while (n < 0 && errno == EINTR);
    if (n != sizeof failure) failure.step = -1;  // EOF: execve succeeded
  } else {
    failure = {kStepExecve, clone_errno};
  }
  ::close(report[0]);
  if (failure.step < 0) return spawned;
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return std::unexpected(SpawnFailure{static_cast<ExecStep>(failure.step), failure.err});
}

}  // namespace cela::agent
