#include "jail/sandbox.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdio>

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

// With a cgroup2 node, the child is born in it (no migration, no global lock).
pid_t clone_child(int* pidfd, int cgroup2_fd) {
  clone_args args{};
  args.flags = kCloneNamespaces | CLONE_PIDFD;
  args.pidfd = reinterpret_cast<uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  if (cgroup2_fd >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup2_fd);
  }
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

int pidfd_signal(int pidfd, int sig) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0)); }

}  // namespace

Result<std::unique_ptr<Sandbox>> Sandbox::start(const SandboxSpec& spec, CgroupHost& cgroups,
                                                const SeccompProgram& seccomp) {
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
  // Init gets the program as a sealed memfd with its config.
  auto sealed = agent::seal_seccomp_program(seccomp);
  if (!sealed) return std::unexpected(sealed.error());
  UniqueFd seccomp_fd = std::move(*sealed);
  auto image = sealed_init_image();
  if (!image) return std::unexpected(image.error());
  const int image_fd = *image;

  int pidfd = -1;
  pid_t pid = clone_child(&pidfd, sb->cgroup_->cgroup2_fd());
  if (pid < 0) return sys_fail("clone3 sandbox init");
  if (pid == 0) {
    // Only async-signal-safe calls until execve: the parent may be multi-threaded
    // (raw syscalls: glibc's set*id would try to sync threads this child lacks).
    // execve keeps capabilities only for the namespace's root, so wait for the id
    // maps ("mapped") and take ns-root's ids first.
    // Die with the thread that cloned us; if the daemon died before this line, the
    // recv below sees EOF instead.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
    // None of the daemon's descriptors may survive the execve (the listening
    // sockets and the database are not all close-on-exec: Asio opens sockets
    // without SOCK_CLOEXEC).
    ::syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);
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
  }
  sb->init_pid_ = pid;
  sb->pidfd_.reset(pidfd);
  child_end.reset();

  // From here on, a failure leaves a child to kill: ~Sandbox() does it.
  if (auto r = protect_init_from_oom(pid); !r) return std::unexpected(r.error());
  if (auto r = write_id_maps(pid, spec.host_uid_base); !r) return std::unexpected(r.error());
  if (::send(sb->control_fd(), "m", 1, MSG_NOSIGNAL) != 1) return sys_fail("signal id maps to init");
  const RootfsSpec rootfs = fit_tmpfs_to_memory(spec.rootfs, spec.limits.memory_bytes);
  json::object config = message(MessageType::config, {{"hostname", spec.hostname}, {"shm_bytes", rootfs.shm_bytes}});
  if (auto r = send_message(sb->control_fd(), config, {seccomp_fd.get()}); !r) return std::unexpected(r.error());
  seccomp_fd.reset();
  if (auto r = send_message(sb->control_fd(), message(MessageType::maps), attach); !r) return std::unexpected(r.error());
  attach_fds->clear();
  {
    std::string userns_path = "/proc/" + std::to_string(pid) + "/ns/user";
    UniqueFd userns(::open(userns_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns) return sys_fail("open " + userns_path);
    auto mounts = prepare_rootfs(rootfs, userns.get(), spec.host_uid_base);
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
    if (agent::is_eof(ready.error())) return fail(ErrorCode::system, "sandbox init exited during setup");
    return std::unexpected(ready.error());
  }
  if (ready->type() == MessageType::setup_error) {
    return fail(ErrorCode::system, "sandbox setup: " + std::string(ready->body.at("step").as_string()),
                ready->body.at("errno").to_number<int>());
  }
  if (ready->type() != MessageType::ready) return fail(ErrorCode::internal, "unexpected message from init during setup");
  sb->startup_ = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - began);
  return sb;
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
  control_.reset();
  upper_.reset();  // the writable layer goes with its last reference
  if (cgroup_) {
    if (auto r = cgroup_->destroy(); !r) return std::unexpected(r.error());
    report.cgroup_removed = true;
  }
  return report;
}

}  // namespace cela::jail
