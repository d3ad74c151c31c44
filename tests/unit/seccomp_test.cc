// The seccomp policy: table sanity, then behaviour. Each behaviour probe runs in a
// forked child that sets no_new_privs, installs the compiled program and reports
// what one syscall returned (or dies, which the parent sees in the wait status).
#include "jail/seccomp.h"

#include <poll.h>

#include <fcntl.h>
#include <dirent.h>
#include <cstdio>
#include <filesystem>
#include <string_view>
#include <gtest/gtest.h>
#include <linux/netlink.h>
#include <pthread.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "agent/protocol.h"
#include "common/fd.h"
#include "jail/exec_notify.h"

namespace cela::jail {
namespace {

std::set<std::string> denied_names() {
  std::set<std::string> names;
  for (const SyscallRule& rule : seccomp_denied_syscalls()) names.insert(rule.name);
  return names;
}

// ---- Tables ----

TEST(SeccompPolicyTest, NoSyscallInTwoTables) {
  const auto& allowed = seccomp_allowed_syscalls();
  const std::set<std::string> allowed_set(allowed.begin(), allowed.end());
  EXPECT_EQ(allowed_set.size(), allowed.size()) << "duplicate name in the allowlist";
  const auto denied = denied_names();
  EXPECT_EQ(denied.size(), seccomp_denied_syscalls().size()) << "duplicate denied name";
  for (const std::string& name : allowed) EXPECT_FALSE(denied.contains(name)) << name;
  // An unconditional allow would override the argument rules (libseccomp absorbs
  // conditional rules into an unconditional one).
  for (const std::string& name : seccomp_argument_filtered_syscalls()) {
    EXPECT_FALSE(allowed_set.contains(name)) << name;
    EXPECT_FALSE(denied.contains(name)) << name;
  }
}

TEST(SeccompPolicyTest, EveryNameIsAnX86_64Syscall) {
  auto check = [](const std::string& name) {
    EXPECT_GE(seccomp_syscall_resolve_name_arch(SCMP_ARCH_X86_64, name.c_str()), 0) << name;
  };
  for (const std::string& name : seccomp_allowed_syscalls()) check(name);
  for (const SyscallRule& rule : seccomp_denied_syscalls()) check(rule.name);
  for (const std::string& name : seccomp_argument_filtered_syscalls()) check(name);
}

TEST(SeccompPolicyTest, SecurityMdAlwaysDeniedListIsPresent) {
  // docs SECURITY.md, "Always denied".
  // clang-format off
  const char* required[] = {
      "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module", "bpf",
      "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "mount", "umount2",
      "pivot_root", "unshare", "setns", "open_by_handle_at", "name_to_handle_at",
      "io_uring_setup", "io_uring_enter", "io_uring_register", "swapon", "swapoff", "reboot",
      "syslog", "acct", "settimeofday", "clock_settime", "iopl", "ioperm", "quotactl",
      "lookup_dcookie", "ptrace", "clone3", "io_setup", "io_submit",
  };
  // clang-format on
  const auto denied = denied_names();
  for (const char* name : required) EXPECT_TRUE(denied.contains(name)) << name;
  const auto& filtered = seccomp_argument_filtered_syscalls();
  for (const char* name : {"clone", "socket", "socketpair", "ioctl", "personality"})
    EXPECT_NE(std::find(filtered.begin(), filtered.end(), name), filtered.end()) << name;
}

TEST(SeccompPolicyTest, Clone3AndAioFailWithEnosysEverythingElseWithEperm) {
  for (const SyscallRule& rule : seccomp_denied_syscalls()) {
    const bool enosys = rule.name == "clone3" || (rule.name.starts_with("io_") && !rule.name.starts_with("io_uring"));
    const auto expected = enosys ? SyscallRule::Action::deny_enosys : SyscallRule::Action::deny_eperm;
    EXPECT_EQ(rule.action, expected) << rule.name;
  }
}

TEST(SeccompPolicyTest, ProgramBuildsAndFitsTheKernelLimit) {
  auto program = build_seccomp_program();
  ASSERT_TRUE(program) << program.error().message();
  EXPECT_GT(program->instructions.size(), 100u);
  EXPECT_LE(program->instructions.size(), static_cast<size_t>(BPF_MAXINSNS));
}

TEST(SeccompPolicyTest, InstallRejectsAnEmptyProgram) {
  EXPECT_EQ(install_seccomp(SeccompProgram{}), EINVAL);
}

// ---- Behaviour ----

struct Outcome {
  bool reported = false;  // the child got past the probe and wrote its result
  long ret = 0;
  int err = 0;
  int status = 0;  // wait status

  bool succeeded() const { return reported && ret >= 0; }
  bool failed_with(int e) const { return reported && ret == -1 && err == e; }
  bool killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  os << "{reported=" << o.reported << " ret=" << o.ret << " errno=" << o.err << " ("
     << std::strerror(o.err) << ")";
  if (WIFSIGNALED(o.status)) os << " killed by signal " << WTERMSIG(o.status);
  return os << "}";
}

// The host half of a watched filter in a test: takes every notification of one child's
// listener with the daemon's own code (take_notification) until the child is gone, and
// keeps what it saw.
class Supervisor {
 public:
  explicit Supervisor(UniqueFd listener) : listener_(std::move(listener)), thread_([this] { loop(); }) {}
  ~Supervisor() { join(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  const std::vector<Notification>& seen() const { return seen_; }

 private:
  void loop() {
    for (;;) {
      pollfd p{listener_.get(), POLLIN, 0};
      if (::poll(&p, 1, 10'000) <= 0) return;  // a test stuck this long fails anyway
      if (p.revents & POLLIN) {
        auto n = take_notification(listener_.get());
        if (!n) return;
        if (*n) seen_.push_back(std::move(**n));
        continue;
      }
      if (p.revents & (POLLHUP | POLLERR)) return;  // no process left under the filter
    }
  }
  UniqueFd listener_;
  std::vector<Notification> seen_;
  std::thread thread_;
};

// Every behaviour test runs twice: under the standalone program (the kernel decides
// alone, as in `cela run`) and under the watched one with a Supervisor answering (as
// in the daemon), where the same probes must get the same errnos.
class SeccompFilterTest : public ::testing::TestWithParam<bool> {
 protected:
  static void SetUpTestSuite() {
    auto built = build_seccomp_program();
    ASSERT_TRUE(built) << built.error().message();
    program_ = new SeccompProgram(std::move(*built));
    auto watched = build_seccomp_program({.execs = true, .violations = true});
    ASSERT_TRUE(watched) << watched.error().message();
    watched_ = new SeccompProgram(std::move(*watched));
  }
  static void TearDownTestSuite() {
    delete program_;
    delete watched_;
    program_ = watched_ = nullptr;
  }

  static bool watched() { return GetParam(); }

  // In a child: leave the terminal's session (a probe like vhangup must not reach
  // the test's tty even if the filter were broken), set no_new_privs, install the
  // program (watched: with a listener, sent to the parent on `to_parent`). Exits 120+
  // when setup fails.
  static void enter_filter(int to_parent) {
    ::setsid();
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(120);
    if (!watched()) {
      if (install_seccomp(*program_) != 0) _exit(121);
      return;
    }
    auto listener = agent::install_seccomp_with_listener(*watched_);
    if (!listener) _exit(121);
    if (!agent::send_message(to_parent, boost::json::object{{"type", "listener"}}, {listener->get()})) _exit(122);
  }

  // The parent's side of enter_filter: the Supervisor of a watched child.
  static std::unique_ptr<Supervisor> supervise(int from_child) {
    if (!watched()) return nullptr;
    auto msg = agent::recv_message(from_child);
    if (!msg || msg->fds.size() != 1) {
      ADD_FAILURE() << "the child sent no listener";
      return nullptr;
    }
    return std::make_unique<Supervisor>(std::move(msg->fds[0]));
  }

  static void socket_pair(int sv[2]) {
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) ADD_FAILURE() << std::strerror(errno);
  }

  // Runs `probe` (returns a syscall-style result, errno on -1) under the filter.
  // `seen`, when given, gets what a watched child's supervisor was told.
  static Outcome run(const std::function<long()>& probe, std::vector<Notification>* seen = nullptr) {
    int fds[2], sv[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe: " << std::strerror(errno);
    socket_pair(sv);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      enter_filter(sv[1]);
      errno = 0;
      const long result[2] = {probe(), errno};
      (void)!::write(fds[1], result, sizeof result);
      _exit(0);
    }
    ::close(fds[1]);
    ::close(sv[1]);
    auto supervisor = supervise(sv[0]);
    ::close(sv[0]);
    Outcome out;
    long result[2];
    if (::read(fds[0], result, sizeof result) == sizeof result) {
      out.reported = true;
      out.ret = result[0];
      out.err = static_cast<int>(result[1]);
    }
    ::close(fds[0]);
    ::waitpid(pid, &out.status, 0);
    if (supervisor) {
      supervisor->join();
      if (seen) *seen = supervisor->seen();
    }
    if (out.reported) {
      EXPECT_TRUE(WIFEXITED(out.status) && WEXITSTATUS(out.status) == 0) << out;
    }
    return out;
  }

  // Execs argv under the filter; returns its stdout and sets *status.
  static std::string run_program(const std::vector<const char*>& argv, int* status,
                                 std::vector<Notification>* seen = nullptr) {
    int fds[2], sv[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe: " << std::strerror(errno);
    socket_pair(sv);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], 1);
      enter_filter(sv[1]);
      std::vector<char*> args;
      for (const char* a : argv) args.push_back(const_cast<char*>(a));
      args.push_back(nullptr);
      ::execv(args[0], args.data());
      _exit(127);
    }
    ::close(fds[1]);
    ::close(sv[1]);
    auto supervisor = supervise(sv[0]);
    ::close(sv[0]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    ::close(fds[0]);
    ::waitpid(pid, status, 0);
    if (supervisor) {
      supervisor->join();
      if (seen) *seen = supervisor->seen();
    }
    return out;
  }

  static SeccompProgram* program_;
  static SeccompProgram* watched_;
};

SeccompProgram* SeccompFilterTest::program_ = nullptr;
SeccompProgram* SeccompFilterTest::watched_ = nullptr;

INSTANTIATE_TEST_SUITE_P(Forms, SeccompFilterTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Watched") : std::string("Standalone");
                         });

TEST_P(SeccompFilterTest, OrdinarySyscallsWork) {
  EXPECT_TRUE(run([] { return static_cast<long>(::getpid()); }).succeeded());
  EXPECT_TRUE(run([] {
                return ::syscall(SYS_uname, nullptr) == -1 && errno == EFAULT ? 0L : -1L;
              }).succeeded());
}

TEST_P(SeccompFilterTest, EveryAlwaysDeniedSyscallFailsWithEperm) {
  // With all-zero arguments: harmless even without a filter (NULL pointers fault,
  // zero flags do nothing), and the child is thrown away anyway.
  for (const SyscallRule& rule : seccomp_denied_syscalls()) {
    if (rule.action != SyscallRule::Action::deny_eperm) continue;
    const int nr = seccomp_syscall_resolve_name(rule.name.c_str());
    ASSERT_GE(nr, 0) << rule.name;
    EXPECT_TRUE(run([nr] { return ::syscall(nr, 0, 0, 0, 0, 0, 0); }).failed_with(EPERM))
        << rule.name;
  }
}

TEST_P(SeccompFilterTest, NamedDangerousCallsFailWithEperm) {
  EXPECT_TRUE(
      run([] { return long{::mount("none", "/mnt", "tmpfs", 0, nullptr)}; }).failed_with(EPERM));
  EXPECT_TRUE(run([] { return long{::unshare(CLONE_NEWUSER)}; }).failed_with(EPERM));
  EXPECT_TRUE(run([] {
                return ::syscall(SYS_keyctl, 0 /*KEYCTL_GET_KEYRING_ID*/, -3, 0);
              }).failed_with(EPERM));
  EXPECT_TRUE(run([] { return ::syscall(SYS_bpf, 0, nullptr, 0); }).failed_with(EPERM));
  EXPECT_TRUE(run([] { return ::ptrace(PTRACE_TRACEME, 0, nullptr, nullptr); }).failed_with(EPERM));
}

TEST_P(SeccompFilterTest, Clone3FailsWithEnosysSoGlibcFallsBack) {
  EXPECT_TRUE(run([] { return ::syscall(SYS_clone3, nullptr, 0); }).failed_with(ENOSYS));
}

TEST_P(SeccompFilterTest, CloneWithAnyNamespaceFlagFailsWithEperm) {
  for (unsigned long flag : {CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID,
                             CLONE_NEWNET, CLONE_NEWCGROUP}) {
    const Outcome o = run([flag] {
      const long r = ::syscall(SYS_clone, flag | SIGCHLD, 0, 0, 0, 0);
      if (r == 0) _exit(0);  // the filter failed: don't let the clone run the probe
      return r;
    });
    EXPECT_TRUE(o.failed_with(EPERM)) << std::hex << flag << std::dec << " " << o;
  }
  // CLONE_NEWTIME is 0x80, inside the exit-signal byte: clone() itself rejects it
  // (EINVAL, an invalid signal); the filter must refuse it first.
  EXPECT_TRUE(run([] {
                const long r = ::syscall(SYS_clone, CLONE_NEWTIME | SIGCHLD, 0, 0, 0, 0);
                if (r == 0) _exit(0);
                return r;
              }).failed_with(EPERM));
}

TEST_P(SeccompFilterTest, ForkAndThreadsStillWork) {
  EXPECT_TRUE(run([] {
                const long r = ::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
                if (r == 0) _exit(7);
                int status = 0;
                if (r < 0 || ::waitpid(static_cast<pid_t>(r), &status, 0) != r) return -1L;
                return WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0L : -1L;
              }).succeeded());
  EXPECT_TRUE(run([] {
                const pid_t pid = ::fork();
                if (pid == 0) _exit(7);
                int status = 0;
                if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1L;
                return WIFEXITED(status) && WEXITSTATUS(status) == 7 ? 0L : -1L;
              }).succeeded());
  // glibc tries clone3 first and falls back to clone on ENOSYS.
  EXPECT_TRUE(run([] {
                static int value = 0;
                pthread_t thread;
                if (int e = ::pthread_create(
                        &thread, nullptr,
                        [](void*) -> void* {
                          value = 42;
                          return nullptr;
                        },
                        nullptr)) {
                  errno = e;
                  return -1L;
                }
                ::pthread_join(thread, nullptr);
                return value == 42 ? 0L : -1L;
              }).succeeded());
}

TEST_P(SeccompFilterTest, SocketFamilies) {
  auto socket_call = [](long family, long type, long protocol) {
    return run([=] {
      const long fd = ::syscall(SYS_socket, family, type, protocol);
      if (fd >= 0) ::close(static_cast<int>(fd));
      return fd;
    });
  };
  EXPECT_TRUE(socket_call(AF_UNIX, SOCK_STREAM, 0).succeeded());
  EXPECT_TRUE(socket_call(AF_INET, SOCK_STREAM, 0).succeeded());
  EXPECT_TRUE(socket_call(AF_INET, SOCK_DGRAM, 0).succeeded());
  EXPECT_TRUE(socket_call(AF_INET6, SOCK_STREAM, 0).succeeded());
  EXPECT_TRUE(socket_call(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE).succeeded());
  EXPECT_TRUE(socket_call(AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE).succeeded());

  EXPECT_TRUE(socket_call(AF_PACKET, SOCK_RAW, 0).failed_with(EAFNOSUPPORT));
  EXPECT_TRUE(socket_call(AF_VSOCK, SOCK_STREAM, 0).failed_with(EAFNOSUPPORT));
  EXPECT_TRUE(socket_call(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT).failed_with(EAFNOSUPPORT));
  EXPECT_TRUE(socket_call(AF_NETLINK, SOCK_RAW, NETLINK_KOBJECT_UEVENT).failed_with(EAFNOSUPPORT));
  EXPECT_TRUE(socket_call(AF_BLUETOOTH, SOCK_STREAM, 0).failed_with(EAFNOSUPPORT));
  // High garbage bits are truncated by the kernel (int family): they must neither
  // let a family through nor block an allowed one.
  EXPECT_TRUE(socket_call(0x100000000L | AF_PACKET, SOCK_RAW, 0).failed_with(EAFNOSUPPORT));
  EXPECT_TRUE(
      socket_call(AF_NETLINK, SOCK_RAW, 0x100000000L | NETLINK_AUDIT).failed_with(EAFNOSUPPORT));
  EXPECT_TRUE(socket_call(0x100000000L | AF_INET, SOCK_STREAM, 0).succeeded());

  EXPECT_TRUE(run([] {
                int sv[2];
                return long{::socketpair(AF_UNIX, SOCK_STREAM, 0, sv)};
              }).succeeded());
  EXPECT_TRUE(run([] {
                int sv[2];
                return long{::socketpair(AF_INET, SOCK_STREAM, 0, sv)};
              }).failed_with(EAFNOSUPPORT));
}

TEST_P(SeccompFilterTest, TerminalInjectionIoctlsFailWithEperm) {
  // On a pipe, without the filter, these would fail with ENOTTY instead.
  auto ioctl_on_pipe = [](unsigned long request) {
    return run([request] {
      int p[2];
      if (::pipe(p) != 0) return -2L;
      int arg = 0;
      return ::syscall(SYS_ioctl, p[0], request, &arg);
    });
  };
  EXPECT_TRUE(ioctl_on_pipe(TIOCSTI).failed_with(EPERM));
  EXPECT_TRUE(ioctl_on_pipe(TIOCLINUX).failed_with(EPERM));
  // The kernel uses only the low 32 bits of the request.
  EXPECT_TRUE(ioctl_on_pipe(0x100000000UL | TIOCSTI).failed_with(EPERM));
  EXPECT_TRUE(ioctl_on_pipe(0xffffffff00000000UL | TIOCLINUX).failed_with(EPERM));

  EXPECT_TRUE(ioctl_on_pipe(FIONREAD).succeeded());
  EXPECT_TRUE(ioctl_on_pipe(TCGETS).failed_with(ENOTTY));  // reached the kernel
  EXPECT_TRUE(ioctl_on_pipe(TIOCSTI + 1).failed_with(ENOTTY));
}

TEST_P(SeccompFilterTest, PersonalityOnlyDockerValues) {
  for (unsigned long persona : {0x0UL, 0x0008UL, 0x20000UL, 0x20008UL, 0xffffffffUL})
    EXPECT_TRUE(run([persona] { return ::syscall(SYS_personality, persona); }).succeeded())
        << std::hex << persona;
  for (unsigned long persona :
       {ADDR_NO_RANDOMIZE | 0UL, READ_IMPLIES_EXEC | 0UL, 0x0008UL | ADDR_NO_RANDOMIZE,
        0x100000000UL | ADDR_NO_RANDOMIZE /* the kernel takes the low 32 bits */})
    EXPECT_TRUE(run([persona] { return ::syscall(SYS_personality, persona); }).failed_with(EPERM))
        << std::hex << persona;
}

TEST_P(SeccompFilterTest, OtherAbisAreKilled) {
  // x32: the x86_64 entry point with bit 30 set in the syscall number.
  // libseccomp's x86_64 filter sends it to the bad-arch action.
  const Outcome x32 = run([] { return ::syscall(0x40000000L | SYS_getpid); });
  EXPECT_TRUE(x32.killed_by(SIGSYS)) << x32;
  // i386: int 0x80 with the i386 number of getpid (20); AUDIT_ARCH_I386 is not ours.
  const Outcome i386 = run([] {
    long ret = 20;
    asm volatile("int $0x80" : "+a"(ret) : : "memory");
    return ret;
  });
  EXPECT_TRUE(i386.killed_by(SIGSYS)) << i386;
}

TEST_P(SeccompFilterTest, UnknownSyscallFailsWithEnosys) {
  EXPECT_TRUE(run([] { return ::syscall(1000); }).failed_with(ENOSYS));
  // Not in any table: falls to the default.
  EXPECT_TRUE(run([] { return ::syscall(SYS_sethostname, "x", 1); }).failed_with(ENOSYS));
}

// The daemon's view: each attempt at a denied syscall reaches the host by name with
// its arguments, answered EPERM; what libc probes on its own (ENOSYS, EAFNOSUPPORT)
// never does. The standalone program reports nothing (no listener).
TEST_P(SeccompFilterTest, ViolationsReachTheHostByNameAndProbesDoNot) {
  std::vector<Notification> seen;
  EXPECT_TRUE(run([] { return long{::mount("none", "/mnt", "tmpfs", 0, nullptr)}; }, &seen).failed_with(EPERM));
  if (watched()) {
    ASSERT_EQ(seen.size(), 1u);
    const auto* v = std::get_if<ViolationNotification>(&seen[0]);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->syscall, "mount");
    EXPECT_GT(v->host_pid, 0);
    EXPECT_EQ(v->uid, ::getuid());
  }
  seen.clear();
  EXPECT_TRUE(run([] {
                const long r = ::syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
                if (r == 0) _exit(0);
                return r;
              }, &seen).failed_with(EPERM));
  if (watched()) {
    ASSERT_EQ(seen.size(), 1u);
    const auto* v = std::get_if<ViolationNotification>(&seen[0]);
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->syscall, "clone");
    EXPECT_EQ(v->args[0] & CLONE_NEWUSER, static_cast<uint64_t>(CLONE_NEWUSER));
  }
  seen.clear();
  EXPECT_TRUE(run([] { return ::syscall(SYS_clone3, nullptr, 0); }, &seen).failed_with(ENOSYS));
  EXPECT_TRUE(run([] { return long{::socket(AF_NETLINK, SOCK_RAW, NETLINK_AUDIT)}; }, &seen).failed_with(EAFNOSUPPORT));
  EXPECT_TRUE(run([] { return ::syscall(1000); }, &seen).failed_with(ENOSYS));
  EXPECT_TRUE(seen.empty()) << seen.size() << " notifications for probes";
}

// Execs go on once the host has read them, with their argv; in the standalone form
// nobody is asked.
TEST_P(SeccompFilterTest, ExecsAreSeenAndGoOn) {
  int status = 0;
  std::vector<Notification> seen;
  const std::string out = run_program({"/bin/sh", "-c", "/bin/echo seen"}, &status, &seen);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(out, "seen\n");
  if (!watched()) {
    EXPECT_TRUE(seen.empty());
    return;
  }
  std::vector<std::string> paths;
  for (const auto& n : seen)
    if (const auto* e = std::get_if<ExecNotification>(&n)) paths.push_back(e->path);
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0], "/bin/sh");
  EXPECT_EQ(paths[1], "/bin/echo");
}

// With its listener gone (a dead daemon), a watched denial still fails, with ENOSYS:
// nothing denied runs for want of an answer.
TEST(SeccompWatchTest, WithoutTheListenerDeniedSyscallsStillFail) {
  auto program = build_seccomp_program({.execs = false, .violations = true});
  ASSERT_TRUE(program) << program.error().message();
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(120);
    auto listener = agent::install_seccomp_with_listener(*program);
    if (!listener) _exit(121);
    listener->reset();  // nobody will answer
    errno = 0;
    const long result[2] = {long{::unshare(CLONE_NEWUSER)}, errno};
    (void)!::write(fds[1], result, sizeof result);
    _exit(0);
  }
  ::close(fds[1]);
  long result[2] = {0, 0};
  EXPECT_EQ(::read(fds[0], result, sizeof result), static_cast<ssize_t>(sizeof result));
  ::close(fds[0]);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(result[0], -1);
  EXPECT_EQ(result[1], ENOSYS);
}

// The cache keeps each watch's program apart: a watched program is never handed to
// a sandbox that has no listener (its denials would all be ENOSYS).
TEST(SeccompWatchTest, TheCacheKeepsEachWatchApart) {
  char tmpl[] = "/tmp/cela-seccomp-watch-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  auto plain = cached_seccomp_program({}, dir);
  auto watched = cached_seccomp_program({.execs = true, .violations = true}, dir);
  auto again = cached_seccomp_program({}, dir);
  ASSERT_TRUE(plain && watched && again);
  auto bytes = [](const SeccompProgram& p) {
    return std::string(reinterpret_cast<const char*>(p.instructions.data()), p.instructions.size() * sizeof(sock_filter));
  };
  EXPECT_NE(bytes(*plain), bytes(*watched));
  EXPECT_EQ(bytes(*plain), bytes(*again));
  std::filesystem::remove_all(dir);
}

TEST_P(SeccompFilterTest, ShellPipelineRuns) {
  int status = 0;
  const std::string out = run_program({"/bin/sh", "-c", "echo ok | cat"}, &status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(out, "ok\n");
}

TEST_P(SeccompFilterTest, PythonThreadsSubprocessMultiprocessingAsyncioCtypesRun) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  const char* script = R"(
import asyncio, ctypes, multiprocessing, os, socket, subprocess, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
assert subprocess.run(['/bin/echo', 'sub'], capture_output=True).stdout == b'sub\n'
with multiprocessing.Pool(2) as pool:
    assert pool.map(abs, [-1, -2]) == [1, 2]
async def main():
    proc = await asyncio.create_subprocess_exec('/bin/true')
    assert await proc.wait() == 0
    await asyncio.get_running_loop().run_in_executor(None, sum, [1, 2])
asyncio.run(main())
assert ctypes.CDLL(None).getpid() == os.getpid()
a, b = socket.socketpair(); a.send(b'x'); assert b.recv(1) == b'x'
print('ok')
)";
  int status = 0;
  const std::string out = run_program({"/usr/bin/python3", "-c", script}, &status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(out, "ok\n");
}

TEST_P(SeccompFilterTest, NodeRuns) {
  if (::access("/usr/bin/node", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/node";
  const char* script = R"(
const fs = require('fs'), cp = require('child_process'), os = require('os');
fs.readFile('/etc/passwd', (err, data) => {
  if (err) throw err;
  cp.execFileSync('/bin/true');
  os.networkInterfaces();
  require('crypto').pbkdf2('k', 's', 1000, 32, 'sha256', (e) => {
    if (e) throw e;
    console.log('ok');
  });
});
)";
  int status = 0;
  const std::string out = run_program({"/usr/bin/node", "-e", script}, &status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(out, "ok\n");
}

TEST_P(SeccompFilterTest, CoreutilsAndGitRun) {
  if (::access("/usr/bin/git", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/git";
  const char* script =
      "set -e; d=$(mktemp -d); cd \"$d\"; git init -q; echo hi > f; chmod 600 f;"
      " git add f; git -c user.email=t@t -c user.name=t commit -qm m;"
      " n=$(git log --oneline | wc -l); cd /; rm -rf \"$d\"; echo \"$n\"";
  int status = 0;
  const std::string out = run_program({"/bin/sh", "-c", script}, &status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(out, "1\n");
}

}  // namespace
}  // namespace cela::jail

namespace {

std::string make_cache_dir() {
  char tmpl[] = "/tmp/cela-seccomp-cache-XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl), nullptr);
  return tmpl;
}

// Another build's cache entry, last used `age_s` seconds ago.
std::string other_build_entry(const std::string& dir, int n, int age_s) {
  std::string path = dir + "/seccomp-0-" + std::to_string(n) + "-0-0.0.bpf";
  FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr);
  std::fputs("junk", f);
  std::fclose(f);
  timespec t[2];
  ::clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= age_s;
  t[1] = t[0];
  EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), t, 0), 0);
  return path;
}

int cache_files(const std::string& dir) {
  int files = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) files += std::string_view(e->d_name).ends_with(".bpf");
    ::closedir(d);
  }
  return files;
}

}  // namespace

// The cache the daemon and the runners share: same program as a fresh compile, one
// file per binary, and another build's program survives this build's miss.
TEST(SeccompCache, CachesTheCompiledProgramAndKeepsOtherBuildsPrograms) {
  const std::string dir = make_cache_dir();
  const std::string other = other_build_entry(dir, 1, 60);

  auto fresh = cela::jail::build_seccomp_program();
  ASSERT_TRUE(fresh.has_value());
  auto first = cela::jail::cached_seccomp_program({}, dir);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(::access(other.c_str(), F_OK), 0) << "another build's program was evicted on a miss";
  auto second = cela::jail::cached_seccomp_program({}, dir);  // from the file now
  ASSERT_TRUE(second.has_value());
  ASSERT_EQ(first->instructions.size(), fresh->instructions.size());
  ASSERT_EQ(second->instructions.size(), fresh->instructions.size());
  EXPECT_EQ(std::memcmp(second->instructions.data(), fresh->instructions.data(),
                        fresh->instructions.size() * sizeof(sock_filter)),
            0);
  EXPECT_EQ(cache_files(dir), 2);
  std::filesystem::remove_all(dir);
}

// A full cache makes room by evicting the least recently used program only.
TEST(SeccompCache, AFullCacheEvictsOnlyTheLeastRecentlyUsed) {
  const std::string dir = make_cache_dir();
  std::vector<std::string> others;
  for (size_t i = 0; i < cela::jail::kSeccompCacheEntries; ++i)
    others.push_back(other_build_entry(dir, static_cast<int>(i), 100 - static_cast<int>(i)));  // others[0] oldest
  ASSERT_TRUE(cela::jail::cached_seccomp_program({}, dir).has_value());
  EXPECT_NE(::access(others[0].c_str(), F_OK), 0) << "the least recently used program stayed";
  for (size_t i = 1; i < others.size(); ++i) EXPECT_EQ(::access(others[i].c_str(), F_OK), 0) << others[i];
  EXPECT_EQ(cache_files(dir), static_cast<int>(cela::jail::kSeccompCacheEntries));
  std::filesystem::remove_all(dir);
}
