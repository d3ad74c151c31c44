#include "jail/file_writer.h"

#include "jail/init_process.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <sched.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace cela::jail {
namespace {

// Exit codes of a writer that failed before its copy loop (a write error exits with
// its errno, always below these).
constexpr int kExitJoin = 200;      // a cgroup join failed
constexpr int kExitSetup = 201;     // descriptors, ids or prctl
constexpr int kExitSeccomp = 202;   // strict mode refused
constexpr int kExitReadPipe = 203;  // reading its stdin failed
constexpr int kPipeBytes = 256 * 1024;

[[noreturn]] void leave(int code) {
  // exit(2), not exit_group: strict mode allows only the former (one thread anyway).
  ::syscall(SYS_exit, code);
  __builtin_unreachable();
}

// The child, from clone3 to exit. Raw syscalls only (see file_writer.h).
// The first steps of every child: die with the cloning thread, join the v1
// hierarchies, be the memory cgroup's first OOM victim (before any id change: /proc/self
// of a non-dumpable process is root's). 0, or the exit code to leave with.
int enter_accounting(const std::vector<int>& tasks) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  for (int fd : tasks)
    if (::write(fd, "0", 1) != 1) return kExitJoin;
  int oom = ::open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
  if (oom < 0 || ::write(oom, "1000", 4) != 4) return kExitSetup;
  ::close(oom);
  return 0;
}

// clone3 without CLONE_VM (the child has its own mm, so its pages are charged to its own
// cgroup), born in the cgroup2 node when there is one. 0 in the child.
Result<pid_t> clone_into(const CgroupEntry& entry, int& pidfd, std::string_view what) {
  clone_args args{};
  args.flags = CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  if (entry.cgroup2) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(entry.cgroup2.get());
  }
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
  if (pid >= 0) return pid;
  // EAGAIN: the sandbox's pids limit (cgroup2) leaves no room for one more process.
  if (errno == EAGAIN) return fail(ErrorCode::limit, "the session is at its process limit", EAGAIN);
  return sys_fail("clone3 " + std::string(what));
}

// Tells the daemon how it ended (fd 2), then exits with the same code.
[[noreturn]] void finish_with(int code) {
  char byte = static_cast<char>(code);
  (void)::write(2, &byte, 1);
  leave(code);
}

[[noreturn]] void run_writer(const std::vector<int>& tasks, int in, int out, int status, uid_t uid, gid_t gid) {
  if (int code = enter_accounting(tasks)) leave(code);
  if (::dup2(in, 0) != 0 || ::dup2(out, 1) != 1 || ::dup2(status, 2) != 2) leave(kExitSetup);
  if (::syscall(SYS_close_range, 3, ~0U, 0) != 0) leave(kExitSetup);
  if (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, gid, gid, gid) != 0 ||
      ::syscall(SYS_setresuid, uid, uid, uid) != 0)
    leave(kExitSetup);
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
    leave(kExitSetup);
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_STRICT, 0, 0, 0) != 0) leave(kExitSeccomp);
  // A copy of the cloning thread's stack: its pages are faulted in (and charged) here.
  char buf[kPipeBytes];
  for (;;) {
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n == 0) finish_with(0);
    if (n < 0) {
      if (errno == EINTR) continue;
      finish_with(kExitReadPipe);
    }
    for (ssize_t done = 0; done < n;) {
      ssize_t w = ::write(1, buf + done, static_cast<size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        finish_with(errno > 0 && errno < kExitJoin ? errno : EIO);
      }
      done += w;
    }
  }
}

// Keeps an fd above `highest`, off the child's dup2 targets.
Result<UniqueFd> above(UniqueFd fd, int highest, std::string_view what) {
  if (fd.get() > highest) return fd;
  UniqueFd moved(::fcntl(fd.get(), F_DUPFD_CLOEXEC, highest + 1));
  if (!moved) return sys_fail(std::string("dup ") + std::string(what));
  return moved;
}

}  // namespace

Result<CgroupEntry> cgroup_entry(const Cgroup& cgroup) {
  CgroupEntry entry;
  if (cgroup.cgroup2_fd() >= 0) {
    entry.cgroup2.reset(::fcntl(cgroup.cgroup2_fd(), F_DUPFD_CLOEXEC, 3));
    if (!entry.cgroup2) return sys_fail("dup cgroup2 fd of " + cgroup.name());
  }
  auto tasks = cgroup.open_self_attach(false);
  if (!tasks) return std::unexpected(tasks.error());
  entry.tasks = std::move(*tasks);
  return entry;
}

Result<FileWriterProcess> spawn_file_writer(const CgroupEntry& entry, UniqueFd dest, uid_t uid,
                                            gid_t gid) {
  if (uid == 0 || gid == 0) return fail(ErrorCode::internal, "a file writer never runs as root");
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return sys_fail("pipe for a file writer");
  UniqueFd read_end(p[0]), write_end(p[1]);
  // Room for one whole body chunk (api/body_sink.h): one write per chunk, and the writer
  // copies one while the next is read. Best effort (the default 64 KiB works too).
  (void)::fcntl(write_end.get(), F_SETPIPE_SZ, kPipeBytes);
  auto in = above(std::move(read_end), 2, "writer pipe");
  if (!in) return std::unexpected(in.error());
  auto out = above(std::move(dest), 2, "writer file");
  if (!out) return std::unexpected(out.error());
  int sp[2];
  if (::pipe2(sp, O_CLOEXEC) != 0) return sys_fail("status pipe for a file writer");
  UniqueFd status_r(sp[0]);
  auto status_w = above(UniqueFd(sp[1]), 2, "writer status");
  if (!status_w) return std::unexpected(status_w.error());
  std::vector<int> tasks;
  for (const auto& fd : entry.tasks) tasks.push_back(fd.get());

  int pidfd = -1;
  auto pid = clone_into(entry, pidfd, "file writer");
  if (!pid) return std::unexpected(pid.error());
  if (*pid == 0) run_writer(tasks, in->get(), out->get(), status_w->get(), uid, gid);
  FileWriterProcess w;
  w.pid = *pid;
  w.pidfd.reset(pidfd);
  w.input = std::move(write_end);
  w.status = std::move(status_r);
  return w;
}

Result<void> file_writer_outcome(int status) {
  if (WIFSIGNALED(status)) {
    return fail(ErrorCode::limit,
                "the write was stopped: the session's memory limit was reached (or the session "
                "ended)");
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 0) return {};
  switch (code) {
    case ENOSPC:
    case EDQUOT:
      return fail(ErrorCode::limit, "the session's disk is full", code);
    case ENOMEM:
      return fail(ErrorCode::limit, "the session's memory limit was reached", code);
    case EFBIG:
      return fail(ErrorCode::limit, "file too large for the session", code);
    case kExitJoin:
      return fail(ErrorCode::gone, "the session's cgroup is gone");
    case kExitSetup:
    case kExitSeccomp:
    case kExitReadPipe:
      return fail(ErrorCode::internal, "file writer setup failed (exit " + std::to_string(code) + ")");
    default:
      if (code > 0 && code < kExitJoin) return fail(ErrorCode::system, "write", code);
      return fail(ErrorCode::internal, "file writer ended with status " + std::to_string(status));
  }
}

Result<int> reap_pidfd(int pidfd) {
  siginfo_t info{};
  while (::waitid(static_cast<idtype_t>(P_PIDFD), static_cast<id_t>(pidfd), &info, WEXITED) != 0) {
    if (errno != EINTR) return sys_fail("wait for a helper process");
  }
  return info.si_code == CLD_EXITED ? (info.si_status & 0xff) << 8 : (info.si_status & 0x7f);
}

Result<void> reap_file_writer(int pidfd) {
  auto status = reap_pidfd(pidfd);
  if (!status) return std::unexpected(status.error());
  return file_writer_outcome(*status);
}

Result<void> file_writer_result(int status_fd, int pidfd, bool& reaped) {
  char byte = 0;
  ssize_t n;
  do n = ::read(status_fd, &byte, 1);
  while (n < 0 && errno == EINTR);
  if (n == 1) return file_writer_outcome(static_cast<unsigned char>(byte) << 8);
  reaped = true;
  return reap_file_writer(pidfd);
}

namespace {

// The capabilities a helper keeps (in the sandbox's user namespace only).
// CAP_SETUID/CAP_SETGID: a helper that acts as a sandbox user (the directory watch)
// drops to that user's ids, all of them the sandbox's own.
constexpr int kHelperCaps[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER, CAP_SETUID, CAP_SETGID};

[[noreturn]] void run_helper(const std::vector<int>& tasks, int userns, int in, int out, int fd3, int image,
                            char** argv) {
  if (int code = enter_accounting(tasks)) ::_exit(code);
  // Root of the sandbox's user namespace: capabilities over what the sandbox owns only.
  if (::setns(userns, CLONE_NEWUSER) != 0) ::_exit(kExitSetup);
  if (::syscall(SYS_setgroups, 0, nullptr) != 0 || ::syscall(SYS_setresgid, 0, 0, 0) != 0 ||
      ::syscall(SYS_setresuid, 0, 0, 0) != 0)
    ::_exit(kExitSetup);
  for (int cap = 0; cap <= 63; ++cap) {
    bool keep = false;
    for (int k : kHelperCaps) keep = keep || k == cap;
    if (!keep && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) ::_exit(kExitSetup);
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(kExitSetup);
  if (::dup2(in, 0) != 0 || ::dup2(out, 1) != 1 || ::dup2(fd3, 3) != 3 || ::dup3(image, 4, O_CLOEXEC) != 4)
    ::_exit(kExitSetup);
  int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null < 0 || ::dup2(null, 2) != 2) ::_exit(kExitSetup);
  if (::syscall(SYS_close_range, 5, ~0U, 0) != 0) ::_exit(kExitSetup);
  // From the sealed helper image: no process in a sandbox's namespaces runs the host file.
  char* envp[] = {nullptr};
  ::syscall(SYS_execveat, 4, "", argv, envp, AT_EMPTY_PATH);
  ::_exit(kExitSetup);
}

}  // namespace

Result<HelperProcess> spawn_helper(const CgroupEntry& entry, int userns_fd, const std::vector<std::string>& args,
                                   UniqueFd fd3) {
  int p[2], q[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return sys_fail("pipe for a helper");
  UniqueFd in_r(p[0]), in_w(p[1]);
  if (::pipe2(q, O_CLOEXEC) != 0) return sys_fail("pipe for a helper");
  UniqueFd out_r(q[0]), out_w(q[1]);
  auto in = above(std::move(in_r), 3, "helper stdin");
  auto out = in ? above(std::move(out_w), 3, "helper stdout") : Result<UniqueFd>(std::unexpected(in.error()));
  auto third = out ? above(std::move(fd3), 3, "helper fd 3") : Result<UniqueFd>(std::unexpected(out.error()));
  if (!third) return std::unexpected(third.error());
  auto image = sealed_helper_image();
  if (!image) return std::unexpected(image.error());
  UniqueFd image_fd(::fcntl(*image, F_DUPFD_CLOEXEC, 5));  // off the child's dup targets 0-4
  if (!image_fd) return sys_fail("dup the helper image");
  std::vector<int> tasks;
  for (const auto& fd : entry.tasks) tasks.push_back(fd.get());
  // argv is built before clone3: the child may not allocate.
  std::vector<std::string> full{"cela"};
  full.insert(full.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : full) argv.push_back(a.data());
  argv.push_back(nullptr);

  int pidfd = -1;
  auto pid = clone_into(entry, pidfd, "helper");
  if (!pid) return std::unexpected(pid.error());
  if (*pid == 0) run_helper(tasks, userns_fd, in->get(), out->get(), third->get(), image_fd.get(), argv.data());
  HelperProcess h;
  h.pid = *pid;
  h.pidfd.reset(pidfd);
  h.input = std::move(in_w);
  h.output = std::move(out_r);
  return h;
}

}  // namespace cela::jail
