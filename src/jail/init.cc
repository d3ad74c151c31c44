#include "jail/init.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "jail/caps.h"
#include "agent/protocol.h"

namespace cela::jail {
namespace json = boost::json;
using agent::ExecRequest;
using agent::ExecStep;
using agent::Message;
using agent::MessageType;
using agent::message;
using agent::recv_message;
using agent::send_message;
namespace {

[[noreturn]] void setup_failed(int control_fd, const Error& error) {
  // `step` here is context for people ("mount overlay on /newroot"), not matched.
  (void)send_message(control_fd, message(MessageType::setup_error, {{"step", error.context}, {"errno", error.err}}));
  ::_exit(1);
}

Result<void> become_namespace_root() {
  // The child was cloned with host root's credentials; only now that the id maps
  // exist can it take ns-root's ids. Without this step a later switch to uid 1000
  // would not clear capabilities: the kernel compares against the ns's root uid.
  if (::setresgid(0, 0, 0) != 0) return sys_fail("setresgid 0");
  if (::setgroups(0, nullptr) != 0) return sys_fail("setgroups");
  if (::setresuid(0, 0, 0) != 0) return sys_fail("setresuid 0");
  return {};
}

Result<void> loopback_up() {
  int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return sys_fail("socket for loopback");
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  int rc = ::ioctl(sock, SIOCGIFFLAGS, &ifr);
  if (rc == 0) {
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    rc = ::ioctl(sock, SIOCSIFFLAGS, &ifr);
  }
  int err = errno;
  ::close(sock);
  if (rc != 0) return sys_fail("bring loopback up", err);
  return {};
}

// Setup that needs only the id maps; runs while the host prepares the root filesystem.
Result<void> setup_namespaces(const InitConfig& config) {
  if (auto r = become_namespace_root(); !r) return r;
  // Changing credentials cleared the parent-death signal: set it again.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // Nothing mounted from here on may propagate back to the host.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return sys_fail("make / private");
  // The cgroup namespace is entered only now, after this process joined its cgroup,
  // so the sandbox sees its own cgroup as the root.
  if (::unshare(CLONE_NEWCGROUP) != 0) return sys_fail("unshare cgroup namespace");
  if (::sethostname(config.hostname.data(), config.hostname.size()) != 0) return sys_fail("sethostname");
  return loopback_up();
}

Result<void> setup_rootfs(const InitConfig& config, Message go) {
  if (go.type() != MessageType::rootfs || go.fds.empty()) return fail(ErrorCode::internal, "expected rootfs message with fds");
  RootfsMounts mounts;
  mounts.overlay = std::move(go.fds[0]);
  const auto& targets = go.body.at("binds").as_array();
  if (targets.size() + 1 != go.fds.size()) return fail(ErrorCode::internal, "bind fds do not match targets");
  for (size_t i = 0; i < targets.size(); ++i)
    mounts.binds.emplace_back(std::string(targets[i].as_string()), std::move(go.fds[i + 1]));
  if (auto r = enter_rootfs(std::move(mounts), config.rootfs, kStagingDir); !r) return r;

  int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  if (devnull < 0) return sys_fail("open /dev/null");
  for (int fd = 0; fd < 3; ++fd) ::dup3(devnull, fd, 0);
  ::close(devnull);
  // Sandbox code (even as ns-root) must not ptrace or read the memory of init.
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return sys_fail("prctl dumpable");
  ::prctl(PR_SET_NAME, "cela-init", 0, 0, 0);
  return {};
}

// ---- Starting an exec -------------------------------------------------------------

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

// The PATH search runs over the exec's own PATH (not init's environment).
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
  rlimit nofile{req.nofile, req.nofile};
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

class Init {
 public:
  Init(const InitConfig& config, int signal_fd) : config_(config), signal_fd_(signal_fd) {}

  [[noreturn]] void serve() {
    for (;;) {
      pollfd fds[2] = {{config_.control_fd, POLLIN, 0}, {signal_fd_, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        ::_exit(1);
      }
      if (fds[1].revents & POLLIN) reap();
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) handle_control();
    }
  }

 private:
  void handle_control() {
    auto msg = recv_message(config_.control_fd);
    // Host gone (or the channel broken): exit; the kernel kills the namespace.
    if (!msg) ::_exit(0);
    MessageType type = msg->type();
    if (type == MessageType::exec) {
      start_exec(*msg);
    } else if (type == MessageType::signal) {
      auto id = msg->body.at("id").to_number<uint64_t>();
      int sig = msg->body.at("signal").to_number<int>();
      for (auto& [pid, exec_id] : execs_)
        if (exec_id == id) ::kill(-pid, sig);
    } else if (type == MessageType::shutdown) {
      ::kill(-1, SIGKILL);
      ::_exit(0);
    }
  }

  void start_exec(Message& msg) {
    const json::object& body = msg.body;
    std::vector<UniqueFd> cgroup_fds = std::move(msg.fds);  // the exec's cgroups, if any
    auto req = ExecRequest::from_json(body);
    if (!req) {
      uint64_t id = body.contains("id") ? body.at("id").to_number<uint64_t>() : 0;
      (void)send_message(config_.control_fd,
                         message(MessageType::exec_error,
                                 {{"id", id}, {"step", to_string(ExecStep::request)}, {"errno", EINVAL}}));
      return;
    }
    int pipes[3][2];
    int report[2];
    if (::pipe2(pipes[0], O_CLOEXEC) || ::pipe2(pipes[1], O_CLOEXEC) || ::pipe2(pipes[2], O_CLOEXEC) ||
        ::pipe2(report, O_CLOEXEC)) {
      (void)send_message(config_.control_fd,
                         message(MessageType::exec_error, {{"id", req->id}, {"step", to_string(ExecStep::pipe)}, {"errno", errno}}));
      return;
    }
    PreparedExec prep;
    prep.req = &*req;
    prep.seccomp = config_.seccomp;
    prep.candidates = exec_candidates(*req);
    for (auto& a : req->argv) prep.argv.push_back(const_cast<char*>(a.c_str()));
    prep.argv.push_back(nullptr);
    for (auto& e : req->env) prep.envp.push_back(const_cast<char*>(e.c_str()));
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
    if (failure.step >= 0) {
      if (pid > 0) ::waitpid(pid, nullptr, 0);
      (void)send_message(config_.control_fd,
                         message(MessageType::exec_error, {{"id", req->id},
                                                           {"step", to_string(static_cast<ExecStep>(failure.step))},
                                                           {"errno", failure.err}}));
    } else {
      execs_[pid] = req->id;
      (void)send_message(config_.control_fd, message(MessageType::started, {{"id", req->id}, {"pid", pid}}),
                         {pipes[0][1], pipes[1][0], pipes[2][0]});
    }
    ::close(pipes[0][1]);
    ::close(pipes[1][0]);
    ::close(pipes[2][0]);
  }

  // Reaps every exited child: execs are reported, orphans re-parented to pid 1 are
  // just collected so no zombie stays behind.
  void reap() {
    signalfd_siginfo info;
    while (::read(signal_fd_, &info, sizeof info) > 0) {
    }
    for (;;) {
      int status = 0;
      pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      auto it = execs_.find(pid);
      if (it == execs_.end()) continue;
      (void)send_message(config_.control_fd, message(MessageType::exited, {{"id", it->second}, {"status", status}}));
      execs_.erase(it);
    }
  }

  const InitConfig& config_;
  int signal_fd_;
  std::map<pid_t, uint64_t> execs_;  // main pid of each running exec -> exec id
};

}  // namespace

void run_init(const InitConfig& config) {
  // Die with the host side; if it is already gone, the first receive sees EOF.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, nullptr);

  // "maps": our uid/gid maps are written; its fds are the v1 cgroup `tasks` files to
  // join (by writing "0": see Cgroup::open_self_attach) before anything else.
  auto maps = recv_message(config.control_fd);
  if (!maps) ::_exit(1);
  for (auto& fd : maps->fds)
    if (::write(fd.get(), "0", 1) != 1) setup_failed(config.control_fd, Error{ErrorCode::system, errno, "join cgroup"});
  maps->fds.clear();
  if (auto r = setup_namespaces(config); !r) setup_failed(config.control_fd, r.error());
  auto go = recv_message(config.control_fd);
  if (!go) ::_exit(1);
  if (auto r = setup_rootfs(config, std::move(*go)); !r) setup_failed(config.control_fd, r.error());

  int signal_fd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) setup_failed(config.control_fd, Error{ErrorCode::system, errno, "signalfd"});
  // Only the control socket and the signalfd stay open in init.
  int low = std::min(config.control_fd, signal_fd), high = std::max(config.control_fd, signal_fd);
  ::syscall(SYS_close_range, 3, low - 1, 0);
  ::syscall(SYS_close_range, low + 1, high - 1, 0);
  ::syscall(SYS_close_range, high + 1, ~0U, 0);
  if (auto r = send_message(config.control_fd, message(MessageType::ready)); !r) ::_exit(1);
  Init(config, signal_fd).serve();
}

void run_init_reexec(int control_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  auto msg = recv_message(control_fd);
  if (!msg) ::_exit(1);
  if (msg->type() != MessageType::config) setup_failed(control_fd, Error{ErrorCode::internal, 0, "expected config message"});
  // The host side compiled (and cached) the program before starting us.
  static SeccompProgram seccomp;
  auto program = cached_seccomp_program();
  if (!program) setup_failed(control_fd, program.error());
  seccomp = std::move(*program);
  static InitConfig config;
  try {
    config.control_fd = control_fd;
    config.hostname = std::string(msg->body.at("hostname").as_string());
    config.rootfs.shm_bytes = msg->body.at("shm_bytes").to_number<uint64_t>();
    config.rootfs.pty_max = msg->body.at("pty_max").to_number<uint32_t>();
    config.seccomp = &seccomp;
  } catch (const std::exception& e) {
    setup_failed(control_fd, Error{ErrorCode::internal, 0, std::string("bad config message: ") + e.what()});
  }
  run_init(config);
}

}  // namespace cela::jail
