#include "agent/spawn.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
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
constexpr int kStepCgroup = static_cast<int>(ExecStep::cgroup), kStepOom = static_cast<int>(ExecStep::oom_score),
              kStepSetsid = static_cast<int>(ExecStep::setsid),
              kStepStdio = static_cast<int>(ExecStep::stdio), kStepRlimit = static_cast<int>(ExecStep::rlimit),
              kStepCaps = static_cast<int>(ExecStep::caps), kStepIds = static_cast<int>(ExecStep::ids),
              kStepChdir = static_cast<int>(ExecStep::chdir), kStepNoNewPrivs = static_cast<int>(ExecStep::no_new_privs),
              kStepExecve = static_cast<int>(ExecStep::execve),
              kStepPty = static_cast<int>(ExecStep::pty);

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

// Everything the exec child needs, prepared by init before the child exists, so the
// child does no more than system calls between fork and execve.
struct PreparedExec {
  const ExecRequest* req = nullptr;
  std::vector<std::string> candidates;  // execve paths to try, in PATH order
  std::vector<char*> argv, envp;
  std::vector<int> cgroup_fds;  // `tasks`/`cgroup.procs` files of the exec's cgroups
  int stdio[3] = {-1, -1, -1};  // the child's pipe ends
  int tty_slave = -1;           // a tty exec's stdio (then `stdio` is unused)
  int report_fd = -1;
  const std::vector<int>* own_caps = nullptr;  // what the exec holds once it runs
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

// Every exec starts at the highest OOM score: the kernel's victims inside a session
// are the execs' processes, never init (-1000, jail/init_process.h), and on a host
// short of memory sandbox processes go before the host's own. They may lower it to 0,
// no further: the inherited floor (oom_score_adj_min) is 0.
constexpr char kExecOomScoreAdj[] = "1000";

// Leaves init's OOM protection behind. The child's /proc/self entries belong to host
// root while it is non-dumpable (its memory is a copy of init's, whose image nobody
// inside can read), so it turns dumpable for this one write. That exposes nothing: it
// still holds every capability of the namespace, so no sandbox process passes the
// ptrace checks on it (a tracer's permitted set must cover the target's), and the
// memory is its own copy, not init's (fork, not CLONE_VM).
int leave_init_oom_score() {
  if (::prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) return errno;
  int err = 0;
  int fd = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (fd < 0 || ::write(fd, kExecOomScoreAdj, sizeof kExecOomScoreAdj - 1) != sizeof kExecOomScoreAdj - 1) err = errno;
  if (fd >= 0) ::close(fd);
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 && err == 0) err = errno;
  return err;
}

const std::vector<int> kNoCaps;

}  // namespace

int prepare_init_for_execs() {
  // Every signal at its default but SIGPIPE: init writes to its control socket and
  // cgroup files and must not die of a closed reader. Whatever started the daemon
  // may have left others ignored (a shell ignores SIGINT and SIGQUIT for background
  // jobs, nohup SIGHUP), and an ignored signal stays ignored across fork and execve.
  // The raw syscall: glibc's sigaction refuses its reserved real-time signals (32,
  // 33), which an ignoring parent leaves ignored too. As pid 1 of its namespace, init
  // never receives a signal from inside that it has no handler for.
  struct {
    void (*handler)(int);
    unsigned long flags;
    void (*restorer)();
    unsigned long mask;
  } dfl{SIG_DFL, 0, nullptr, 0};
  for (int sig = 1; sig <= 64; ++sig) (void)::syscall(SYS_rt_sigaction, sig, &dfl, nullptr, sizeof dfl.mask);
  if (::signal(SIGPIPE, SIG_IGN) == SIG_ERR) return errno;
  // Lowering the bounding set leaves init's own capabilities as they are; it bounds
  // only what a later execve grants, so every exec inherits the lowered set.
  return drop_bounding_set();
}

namespace {

// The capabilities the exec holds once it runs: a root exec gets the bounding set
// (execve gives root every capability the bounding set still has), any other none.
const std::vector<int>& own_capabilities(const ExecRequest& req) { return req.uid == 0 ? kept_capabilities() : kNoCaps; }

// The exec child: from init's state to the exec's. Order matters: join the exec's
// cgroups first (before the child does anything), ids, then the exec's own
// capabilities; chdir and execve come after that, so the exec's cwd and program are
// resolved with the exec's own credentials, never with init's (a root exec with init's
// CAP_SYS_PTRACE could chdir into or execute any process's /proc/PID/cwd or exe). The
// seccomp policy is init's own, inherited through fork (init.cc).
[[noreturn]] void exec_child(const PreparedExec& p) {
  const ExecRequest& req = *p.req;
  int report_fd = p.report_fd;
  // init ignores SIGPIPE (its dispositions are otherwise the defaults:
  // prepare_init_for_execs), and execve keeps an ignored signal ignored: without this,
  // `yes | head -c1` would never see its broken pipe.
  (void)::signal(SIGPIPE, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int fd : p.cgroup_fds)
    if (::write(fd, "0", 1) != 1) exec_failed(report_fd, kStepCgroup, errno);
  if (int err = leave_init_oom_score()) exec_failed(report_fd, kStepOom, err);
  if (::setsid() < 0) exec_failed(report_fd, kStepSetsid, errno);
  // stdio first: every pipe end is >= 3 (init's 0-2 are /dev/null), so filling 0-2
  // clobbers nothing still needed; only then may fd 3 be overwritten by the report fd.
  if (p.tty_slave >= 0) {
    // The new session's controlling terminal; its process group is the foreground one.
    if (::ioctl(p.tty_slave, TIOCSCTTY, 0) != 0) exec_failed(report_fd, kStepPty, errno);
    if (::dup2(p.tty_slave, 0) < 0 || ::dup2(p.tty_slave, 1) < 0 || ::dup2(p.tty_slave, 2) < 0)
      exec_failed(report_fd, kStepStdio, errno);
  } else if (::dup2(p.stdio[0], 0) < 0 || ::dup2(p.stdio[1], 1) < 0 || ::dup2(p.stdio[2], 2) < 0) {
    exec_failed(report_fd, kStepStdio, errno);
  }
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

  // The bounding set is init's, already lowered (prepare_init_for_execs).
  gid_t gid = req.gid;
  if (::setgroups(1, &gid) != 0 || ::setresgid(req.gid, req.gid, req.gid) != 0 ||
      ::setresuid(req.uid, req.uid, req.uid) != 0)
    exec_failed(report_fd, kStepIds, errno);
  if (req.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    exec_failed(report_fd, kStepNoNewPrivs, errno);
  // A non-root uid switch already cleared the permitted set; root keeps the bounding
  // set's capabilities and nothing else.
  if (int err = set_capabilities(*p.own_caps)) exec_failed(report_fd, kStepCaps, err);
  if (::chdir(req.cwd.c_str()) != 0) exec_failed(report_fd, kStepChdir, errno);
  int saved = ENOENT;
  for (const auto& candidate : p.candidates) {
    ::execve(candidate.c_str(), p.argv.data(), p.envp.data());
    if (errno == EACCES) saved = EACCES;
    else if (errno != ENOENT && errno != ENOTDIR) exec_failed(report_fd, kStepExecve, errno);
  }
  exec_failed(report_fd, kStepExecve, saved);
}

// A pty of the sandbox's own devpts (mounted newinstance with max=, agent/rootfs.h):
// the master for the host, the slave for the exec, owned by the exec's user (mode 0600)
// like a login's terminal. ENOSPC once the session's ptys are all taken.
struct Pty {
  UniqueFd master, slave;
};
std::expected<Pty, int> open_pty(const ExecRequest& req) {
  Pty pty;
  pty.master = UniqueFd(::open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_NOFOLLOW | O_CLOEXEC));
  if (!pty.master) return std::unexpected(errno);
  int unlock = 0;
  if (::ioctl(pty.master.get(), TIOCSPTLCK, &unlock) != 0) return std::unexpected(errno);
  winsize size{};
  size.ws_col = req.cols;
  size.ws_row = req.rows;
  if (::ioctl(pty.master.get(), TIOCSWINSZ, &size) != 0) return std::unexpected(errno);
  // The peer of this very master, not a path: nothing inside can swap /dev/pts/N.
  pty.slave = UniqueFd(::ioctl(pty.master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!pty.slave) return std::unexpected(errno);
  if (::fchown(pty.slave.get(), req.uid, req.gid) != 0 || ::fchmod(pty.slave.get(), 0600) != 0)
    return std::unexpected(errno);
  return pty;
}

}  // namespace

std::expected<Spawned, SpawnFailure> spawn_exec(const ExecRequest& req,
                                                const std::vector<UniqueFd>& cgroup_fds) {
  // Init's ends (for the host) and the child's: three pipes, or a pty whose master
  // serves as stdin and stdout and an empty pipe standing for stderr.
  UniqueFd ours[3], theirs[3], report_r, report_w, slave;
  auto make_pipe = [](UniqueFd& r, UniqueFd& w) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return false;
    r = UniqueFd(fds[0]);
    w = UniqueFd(fds[1]);
    return true;
  };
  if (!make_pipe(report_r, report_w)) return std::unexpected(SpawnFailure{ExecStep::pipe, errno});
  if (req.tty) {
    auto pty = open_pty(req);
    if (!pty) return std::unexpected(SpawnFailure{ExecStep::pty, pty.error()});
    UniqueFd empty_w;
    ours[1] = UniqueFd(::fcntl(pty->master.get(), F_DUPFD_CLOEXEC, 3));
    if (!ours[1] || !make_pipe(ours[2], empty_w)) return std::unexpected(SpawnFailure{ExecStep::pipe, errno});
    ours[0] = std::move(pty->master);
    slave = std::move(pty->slave);
  } else if (!make_pipe(theirs[0], ours[0]) || !make_pipe(ours[1], theirs[1]) || !make_pipe(ours[2], theirs[2])) {
    return std::unexpected(SpawnFailure{ExecStep::pipe, errno});
  }
  PreparedExec prep;
  prep.req = &req;
  prep.candidates = exec_candidates(req);
  for (auto& a : req.argv) prep.argv.push_back(const_cast<char*>(a.c_str()));
  prep.argv.push_back(nullptr);
  for (auto& e : req.env) prep.envp.push_back(const_cast<char*>(e.c_str()));
  prep.envp.push_back(nullptr);
  for (auto& fd : cgroup_fds) prep.cgroup_fds.push_back(fd.get());
  for (int i = 0; i < 3; ++i) prep.stdio[i] = theirs[i].get();
  prep.tty_slave = slave.get();
  prep.report_fd = report_w.get();
  prep.own_caps = &own_capabilities(req);
  // A fork, not CLONE_VM|CLONE_VFORK: the child needs memory of its own to turn
  // dumpable for its OOM score (leave_init_oom_score). Init still waits (on the
  // report pipe below) until the child has called execve or failed.
  pid_t pid = ::fork();
  if (pid == 0) exec_child(prep);
  int clone_errno = errno;
  // Init keeps none of the child's ends: the host sees EOF (or EIO on the pty) once
  // the exec's processes have closed theirs.
  report_w.reset();
  slave.reset();
  for (auto& fd : theirs) fd.reset();
  ExecFailure failure{-1, 0};
  if (pid > 0) {
    ssize_t n;
    do n = ::read(report_r.get(), &failure, sizeof failure);
    while (n < 0 && errno == EINTR);
    if (n != sizeof failure) failure.step = -1;  // EOF: execve succeeded
  } else {
    failure = {kStepExecve, clone_errno};
  }
  if (failure.step < 0) return Spawned{pid, std::move(ours[0]), std::move(ours[1]), std::move(ours[2])};
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return std::unexpected(SpawnFailure{static_cast<ExecStep>(failure.step), failure.err});
}

}  // namespace cela::agent
