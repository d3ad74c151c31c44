#include "jail/sandbox.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <linux/securebits.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <functional>

#include "common/fs.h"
#include "agent/init.h"
#include "jail/init_process.h"
#include "jail/userns.h"

namespace cela::jail {
namespace json = boost::json;
using agent::ExecRequest;
using agent::Message;
using agent::MessageType;
using agent::message;
using agent::recv_message;
using agent::send_message;
namespace {

// The namespaces cloned at birth. The cgroup namespace is entered by init itself
// after the host attached it to its cgroup (see agent/init.cc).
constexpr uint64_t kCloneNamespaces =
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET;

// An init child that dies before it can report over the control socket says why in its
// exit status.
constexpr int kExitUserNsLimits = 120;  // writing /proc/sys/user in its namespace failed

// The launcher's stack. Reserved, not committed: only the pages touched cost memory.
// Big because in `cela run` (no re-exec) init keeps running on a copy of it.
constexpr size_t kLauncherStackBytes = 8u << 20;

// Everything the launcher and the init child read, prepared before the first clone:
// the launcher shares the caller's memory (CLONE_VM|CLONE_VFORK) while the caller's
// other threads run, so it only reads this and makes system calls.
struct Launch {
  uint32_t owner = 0;  // host uid (and gid) that owns the user namespace
  struct Limit {
    int resource;
    rlimit value;
  };
  std::vector<Limit> rlimits;
  std::vector<std::pair<std::string, std::string>> user_ns;  // /proc/sys/user file, value
  int cgroup2_fd = -1;
  const std::function<void()>* child = nullptr;  // the init child's body; never returns
  // Written by the launcher.
  int pidfd = -1;
  pid_t pid = -1;
  int err = 0;
  const char* step = nullptr;
};

// The launcher: a process of its own (rlimits and credentials are per process)
// sharing the caller's memory and fd table. It takes the session's rlimits and the
// slot's uid as its effective uid, then clones init as a sibling (CLONE_PARENT: the
// calling thread stays init's parent, for waitpid and the parent-death signal). A
// user namespace is owned by its creator's effective uid and takes its rlimits as the
// namespace's ceilings, so both are the session's, not host root's.
int launcher_main(void* arg) {
  Launch& l = *static_cast<Launch*>(arg);
  auto failed = [&](const char* step) {
    l.err = errno;
    l.step = step;
    return 1;
  };
  for (const Launch::Limit& limit : l.rlimits)
    if (::syscall(SYS_prlimit64, 0, limit.resource, &limit.value, nullptr) != 0) return failed("set session rlimits");
  // Keep the capabilities across the change of effective uid: joining the cgroup at
  // clone time checks them. They stay in this process; init gets a fresh set in its
  // own namespace.
  if (::prctl(PR_SET_SECUREBITS, SECBIT_NO_SETUID_FIXUP, 0, 0, 0) != 0) return failed("keep capabilities");
  if (::syscall(SYS_setresgid, -1, l.owner, -1) != 0 || ::syscall(SYS_setresuid, -1, l.owner, -1) != 0)
    return failed("take the slot's uid");
  clone_args args{};
  args.flags = kCloneNamespaces | CLONE_PIDFD | CLONE_PARENT;
  args.pidfd = reinterpret_cast<uint64_t>(&l.pidfd);
  args.exit_signal = 0;  // CLONE_PARENT: init inherits the launcher's (SIGCHLD)
  if (l.cgroup2_fd >= 0) {
    // With a cgroup2 node, the child is born in it (no migration, no global lock).
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(l.cgroup2_fd);
  }
  pid_t pid = static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
  if (pid < 0) return failed("clone3 sandbox init");
  if (pid == 0) {
    (*l.child)();
    ::_exit(127);
  }
  l.pid = pid;
  return 0;
}

// Runs the launcher and waits for it; init's pid and pidfd are in `l` afterwards.
Result<void> launch_init(Launch& l) {
  void* stack = ::mmap(nullptr, kLauncherStackBytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return sys_fail("mmap launcher stack");
  pid_t launcher = ::clone(launcher_main, static_cast<char*>(stack) + kLauncherStackBytes,
                           CLONE_VM | CLONE_VFORK | CLONE_FILES | SIGCHLD, &l);
  int clone_errno = errno;
  ::munmap(stack, kLauncherStackBytes);  // init runs on its own copy
  if (launcher < 0) return sys_fail("clone sandbox launcher", clone_errno);
  int status = 0;
  while (::waitpid(launcher, &status, 0) < 0 && errno == EINTR) {
  }
  if (l.step) return sys_fail(l.step, l.err);
  if (l.pid < 0) return fail(ErrorCode::system, "sandbox launcher died (status " + std::to_string(status) + ")");
  return {};
}

int pidfd_signal(int pidfd, int sig) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0)); }

}  // namespace

Result<std::unique_ptr<Sandbox>> Sandbox::start(const SandboxSpec& spec, CgroupHost& cgroups,
                                                int sealed_seccomp) {
  auto began = std::chrono::steady_clock::now();
  if (auto r = make_dirs(kStagingDir, 0755); !r) return std::unexpected(r.error());
  std::unique_ptr<Sandbox> sb(new Sandbox());

  auto cgroup = cgroups.create(spec.name);
  if (!cgroup) return std::unexpected(cgroup.error());
  sb->cgroup_ = std::move(*cgroup);
  if (auto r = sb->cgroup_->apply(spec.limits); !r) return std::unexpected(r.error());

  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) return sys_fail("socketpair");
  sb->control_.reset(pair[0]);
  UniqueFd child_end(pair[1]);

  auto attach_fds = sb->cgroup_->open_self_attach();
  if (!attach_fds) return std::unexpected(attach_fds.error());
  std::vector<int> attach;
  for (const auto& fd : *attach_fds) attach.push_back(fd.get());
  auto image = sealed_init_image();
  if (!image) return std::unexpected(image.error());
  const int image_fd = *image;

  Launch launch;
  launch.owner = spec.host_uid_base;
  launch.cgroup2_fd = sb->cgroup_->cgroup2_fd();
  for (auto [resource, value] : {std::pair{RLIMIT_SIGPENDING, spec.budgets.sigpending},
                                 std::pair{RLIMIT_MSGQUEUE, spec.budgets.msgqueue_bytes},
                                 std::pair{RLIMIT_MEMLOCK, spec.budgets.memlock_bytes}}) {
    // Without CAP_SYS_RESOURCE a hard limit can only go down: never above ours.
    rlimit ours{};
    if (::getrlimit(resource, &ours) != 0) return sys_fail("getrlimit");
    rlim_t v = std::min<rlim_t>(value, ours.rlim_max);
    launch.rlimits.push_back({resource, rlimit{v, v}});
  }
  for (const auto& limit : spec.budgets.user_ns)
    launch.user_ns.emplace_back("/proc/sys/user/" + limit.name, std::to_string(limit.value));
  const std::function<void()> child = [&] {
    // Only async-signal-safe calls until execve: the parent may be multi-threaded
    // (raw syscalls: glibc's set*id would try to sync threads this child lacks).
    // execve keeps capabilities only for the namespace's root, so wait for the id
    // maps ("mapped") and take ns-root's ids first.
    // Die with the thread that cloned us; if the daemon died before this line, the
    // recv below sees EOF instead.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    // None of the daemon's descriptors may stay here (the listening sockets and the
    // database are not all close-on-exec: Asio opens sockets without SOCK_CLOEXEC):
    // closed now, not at execve, so none is held while this child waits. Kept: the
    // control socket and the sealed init image.
    unsigned low = static_cast<unsigned>(std::min(child_end.get(), image_fd));
    unsigned high = static_cast<unsigned>(std::max(child_end.get(), image_fd));
    if (low > 3) ::syscall(SYS_close_range, 3, low - 1, 0);
    if (high > low + 1) ::syscall(SYS_close_range, low + 1, high - 1, 0);
    ::syscall(SYS_close_range, high + 1, ~0U, 0);
    // The namespace's own limits, before anything else runs in it. Its root may
    // write them (CAP_SYS_RESOURCE in the namespace); no id map is needed for that.
    // A name this kernel lacks (ENOENT) counts nothing here.
    for (const auto& [path, value] : launch.user_ns) {
      int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd < 0 && errno == ENOENT) continue;
      if (fd < 0 || ::write(fd, value.data(), value.size()) != static_cast<ssize_t>(value.size()))
        ::_exit(kExitUserNsLimits);
      ::close(fd);
    }
    char byte;
    if (::recv(child_end.get(), &byte, 1, 0) != 1) ::_exit(127);
    if (::syscall(SYS_setresgid, 0, 0, 0) != 0 || ::syscall(SYS_setgroups, 0, nullptr) != 0 ||
        ::syscall(SYS_setresuid, 0, 0, 0) != 0)
      ::_exit(126);
    int exe = image_fd;
    if (exe == agent::kReexecControlFd && (exe = ::fcntl(image_fd, F_DUPFD_CLOEXEC, 4)) < 0) ::_exit(127);
    if (child_end.get() == agent::kReexecControlFd) {
      if (::fcntl(agent::kReexecControlFd, F_SETFD, 0) < 0) ::_exit(127);
    } else if (::dup2(child_end.get(), agent::kReexecControlFd) < 0) {
      ::_exit(127);
    }
    // From the sealed image, never the host's binary (jail/init_process.h).
    char* argv[] = {const_cast<char*>(agent::kInitArgv0), nullptr};  // execve only reads it
    char* envp[] = {nullptr};
    ::syscall(SYS_execveat, exe, "", argv, envp, AT_EMPTY_PATH);
    ::_exit(127);
  };
  launch.child = &child;
  if (auto r = launch_init(launch); !r) return std::unexpected(r.error());
  pid_t pid = launch.pid;
  int pidfd = launch.pidfd;
  sb->init_pid_ = pid;
  sb->pidfd_.reset(pidfd);
  child_end.reset();

  // From here on, a failure leaves a child to kill: ~Sandbox() does it.
  if (auto r = protect_init_from_oom(pid); !r) return std::unexpected(r.error());
  if (auto r = write_id_maps(pid, spec.host_uid_base); !r) {
    // The usual reason: init is already gone.
    siginfo_t info{};
    if (::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid)
      return std::unexpected(sb->died_during_setup());
    return std::unexpected(r.error());
  }
  if (::send(sb->control_fd(), "m", 1, MSG_NOSIGNAL) != 1) return sys_fail("signal id maps to init");
  // A disk-backed layer is not memory: only /dev/shm (and a tmpfs layer) must fit.
  RootfsSpec rootfs = fit_tmpfs_to_memory(spec.rootfs, spec.limits.memory_bytes);
  if (spec.disk_root >= 0) rootfs.disk_bytes = spec.rootfs.disk_bytes;
  json::object config = message(MessageType::config, {{"hostname", spec.hostname},
                                                       {"shm_bytes", rootfs.shm_bytes},
                                                       {"pty_max", rootfs.pty_max},
                                                       {"door_port", spec.door_port}});
  if (spec.listener) config["listener"] = true;
  if (auto r = send_message(sb->control_fd(), config, {sealed_seccomp}); !r) return std::unexpected(r.error());
  if (auto r = send_message(sb->control_fd(), message(MessageType::maps), attach); !r) return std::unexpected(r.error());
  attach_fds->clear();
  {
    std::string userns_path = "/proc/" + std::to_string(pid) + "/ns/user";
    UniqueFd userns(::open(userns_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns) return sys_fail("open " + userns_path);
    auto mounts = prepare_rootfs(rootfs, userns.get(), spec.host_uid_base, spec.disk_root, spec.volumes);
    if (!mounts) return std::unexpected(mounts.error());
    sb->upper_ = std::move(mounts->upper);
    json::array targets;
    std::vector<int> fds{mounts->overlay.get()};
    for (auto& [target, fd] : mounts->binds) {
      targets.emplace_back(target);
      fds.push_back(fd.get());
    }
    if (auto r = send_message(sb->control_fd(), message(MessageType::rootfs, {{"binds", targets}}), fds); !r)
      return std::unexpected(r.error());
  }  // our copies of the mount fds close here; the sandbox holds the only references

  auto ready = recv_message(sb->control_fd());
  if (!ready) {
    if (agent::is_eof(ready.error())) return std::unexpected(sb->died_during_setup());
    return std::unexpected(ready.error());
  }
  if (ready->type() == MessageType::setup_error) {
    return fail(ErrorCode::system, "sandbox setup: " + std::string(ready->body.at("step").as_string()),
                ready->body.at("errno").to_number<int>());
  }
  if (ready->type() != MessageType::ready) return fail(ErrorCode::internal, "unexpected message from init during setup");
  // ready carries the policy's listener (listener), then the door (door_port).
  size_t want = (spec.listener ? 1 : 0) + (spec.door_port ? 1 : 0);
  if (ready->fds.size() != want)
    return fail(ErrorCode::internal, "init's ready came without its descriptors (policy listener, egress door)");
  size_t at = 0;
  if (spec.listener) sb->listener_ = std::move(ready->fds[at++]);
  if (spec.door_port) sb->door_ = std::move(ready->fds[at++]);
  sb->startup_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began);
  return sb;
}

Error Sandbox::died_during_setup() {
  int status = 0;
  if (::waitpid(init_pid_, &status, 0) == init_pid_) reaped_ = true;
  if (WIFEXITED(status) && WEXITSTATUS(status) == kExitUserNsLimits)
    return Error{ErrorCode::system, 0, "sandbox init could not set its user namespace limits (/proc/sys/user)"};
  return Error{ErrorCode::system, 0, "sandbox init exited during setup (wait status " + std::to_string(status) + ")"};
}

Sandbox::~Sandbox() {
  if (auto r = destroy(); !r) std::fprintf(stderr, "cela: sandbox teardown: %s\n", r.error().message().c_str());
}

Result<Message> Sandbox::wait_for(MessageType type, uint64_t id) {
  for (;;) {
    auto msg = recv_message(control_fd());
    if (!msg) {
      if (agent::is_eof(msg.error())) return fail(ErrorCode::system, "sandbox init died");
      return msg;
    }
    auto* mid = msg->body.if_contains("id");
    bool ours = mid && mid->to_number<uint64_t>() == id;
    if (ours && (msg->type() == type || msg->type() == MessageType::exec_error)) return msg;
    pending_.push_back(std::move(*msg));
  }
}

Result<StartedExec> Sandbox::exec(ExecRequest request) {
  request.id = next_exec_id_++;
  if (auto r = send_message(control_fd(), request.to_json()); !r) return std::unexpected(r.error());
  auto reply = wait_for(MessageType::started, request.id);
  if (!reply) return std::unexpected(reply.error());
  if (reply->type() == MessageType::exec_error) {
    return fail(ErrorCode::invalid_argument, std::string(reply->body.at("step").as_string()),
                reply->body.at("errno").to_number<int>());
  }
  if (reply->fds.size() != 3) return fail(ErrorCode::internal, "started message without stdio fds");
  StartedExec out;
  out.id = request.id;
  out.pid = reply->body.at("pid").to_number<pid_t>();
  out.stdin_w = std::move(reply->fds[0]);
  out.stdout_r = std::move(reply->fds[1]);
  out.stderr_r = std::move(reply->fds[2]);
  return out;
}

Result<void> Sandbox::send_exec(const ExecRequest& request, const std::vector<int>& fds) {
  return send_message(control_fd(), request.to_json(), fds);
}

Result<void> Sandbox::signal_exec(uint64_t id, int sig) {
  return send_message(control_fd(), message(MessageType::signal, {{"id", id}, {"signal", sig}}));
}

Result<void> Sandbox::request_socket(uint64_t ref) {
  return send_message(control_fd(), message(MessageType::open_socket, {{"ref", ref}}));
}

Result<Message> Sandbox::next_event() {
  if (!pending_.empty()) {
    Message m = std::move(pending_.front());
    pending_.pop_front();
    return m;
  }
  // A `started` whose pipes the daemon had no room for still names its exec.
  return recv_message(control_fd(), true);
}

void Sandbox::kill() {
  if (pidfd_ && !reaped_) pidfd_signal(pidfd_.get(), SIGKILL);
  if (cgroup_) (void)cgroup_->kill_all();
}

void Sandbox::kill_and_reap() {
  kill();
  if (init_pid_ > 0 && !reaped_) {
    // Returns only after the kernel has killed and released every process of the
    // pid namespace: init's exit waits for them.
    while (::waitpid(init_pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
  }
}

Result<TeardownReport> Sandbox::destroy() {
  TeardownReport report;
  if (destroyed_) return report;
  destroyed_ = true;
  if (cgroup_) {
    if (auto stats = cgroup_->stats(); stats) report.processes_killed = stats->pids_current;
  }
  kill_and_reap();
  listener_.reset();
  control_.reset();
  upper_.reset();  // the writable layer goes with its last reference
  if (cgroup_) {
    if (auto r = cgroup_->destroy(); !r) return std::unexpected(r.error());
    report.cgroup_removed = true;
  }
  return report;
}

}  // namespace cela::jail
