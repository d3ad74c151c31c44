#include "rootfs/build_process.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/fd.h"

namespace cela::rootfs {

namespace {

// What the child writes to the parent when a setup step fails before execve.
struct ChildFailure {
  int step;
  int err;
};

[[noreturn]] void child_fail(int report_fd, int step) {
  ChildFailure failure{step, errno};
  // Nothing to do if the parent is gone; it sees a 127 exit either way.
  [[maybe_unused]] ssize_t n = ::write(report_fd, &failure, sizeof failure);
  ::_exit(127);
}

}  // namespace

Result<void> run_in_private_mount_ns(const BuildCommand& command) {
  if (command.argv.empty() || command.argv[0].empty() || command.argv[0][0] != '/')
    return fail(ErrorCode::internal, "build command needs an absolute argv[0]");

  // Everything the child touches is prepared here: between fork and execve the child
  // makes only async-signal-safe calls (the daemon that calls this has threads).
  std::vector<char*> argv;
  for (const auto& a : command.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : command.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  // Step names for error reports, indexed by the step the child reports.
  std::vector<std::string> steps = {"unshare(CLONE_NEWNS)",
                                    "make mounts private (MS_REC|MS_PRIVATE)"};
  for (const auto& m : command.mounts)
    steps.push_back("mount " + (m.fstype.empty() ? m.source : m.fstype) + " on " + m.target);
  const int first_later_step = static_cast<int>(steps.size());
  steps.push_back("chroot " + command.chroot);
  steps.push_back("chdir /");
  steps.push_back("redirect stdio");
  steps.push_back("execve " + command.argv[0]);

  UniqueFd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!dev_null) return sys_fail("open /dev/null");
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return sys_fail("pipe2");
  UniqueFd report_read(pipe_fds[0]);
  UniqueFd report_write(pipe_fds[1]);

  pid_t pid = ::fork();
  if (pid < 0) return sys_fail("fork for " + command.argv[0]);
  if (pid == 0) {
    const int report = report_write.get();
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);

    int step = 0;
    if (::unshare(CLONE_NEWNS) != 0) child_fail(report, step);
    ++step;
    // The new namespace starts as a copy sharing propagation with the host's; make
    // it private before the first mount so no mount event travels back.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail(report, step);
    for (const auto& m : command.mounts) {
      ++step;
      if (::mount(m.source.c_str(), m.target.c_str(), m.fstype.empty() ? nullptr : m.fstype.c_str(),
                  m.flags, nullptr) != 0)
        child_fail(report, step);
    }
    step = first_later_step;
    if (!command.chroot.empty() && ::chroot(command.chroot.c_str()) != 0) child_fail(report, step);
    ++step;
    if (::chdir("/") != 0) child_fail(report, step);
    ++step;
    if (::dup2(dev_null.get(), STDIN_FILENO) < 0) child_fail(report, step);
    if (command.output_fd >= 0) {
      if (::dup2(command.output_fd, STDOUT_FILENO) < 0) child_fail(report, step);
      if (::dup2(command.output_fd, STDERR_FILENO) < 0) child_fail(report, step);
    }
    // No fd of cela's (API socket, state files) reaches the build tools.
    ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
    ++step;
    ::execve(argv[0], argv.data(), envp.data());
    child_fail(report, step);
  }

  report_write.reset();
  ChildFailure failure{};
  ssize_t n;
  do {
    n = ::read(report_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return sys_fail("waitpid " + command.argv[0]);
  }
  if (n == static_cast<ssize_t>(sizeof failure)) {
    const std::string& what = failure.step >= 0 && failure.step < static_cast<int>(steps.size())
                                  ? steps[static_cast<size_t>(failure.step)]
                                  : std::string("child setup");
    return sys_fail(what, failure.err);
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  if (WIFSIGNALED(status))
    return fail(ErrorCode::system,
                command.argv[0] + " killed by signal " + std::to_string(WTERMSIG(status)));
  return fail(ErrorCode::system,
              command.argv[0] + " exited with status " + std::to_string(WEXITSTATUS(status)));
}

}  // namespace cela::rootfs
