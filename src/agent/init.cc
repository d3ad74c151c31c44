#include "agent/init.h"

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
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "agent/protocol.h"
#include "agent/rootfs.h"
#include "agent/spawn.h"

namespace cela::agent {
namespace json = boost::json;
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

// The egress door: a TCP listener on 127.0.0.1:port in this (the session's) network
// namespace. It is created here, before any sandbox code runs, so nothing inside can
// take the port first; init keeps no copy once the host has it.
Result<UniqueFd> open_door(uint16_t port) {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock) return sys_fail("socket for the egress door");
  int one = 1;
  ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    return sys_fail("bind the egress door 127.0.0.1:" + std::to_string(port));
  if (::listen(sock.get(), 256) != 0) return sys_fail("listen on the egress door");
  return sock;
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
  return {};
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
    } else if (type == MessageType::open_socket) {
      open_socket(msg->body);
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
    auto spawned = spawn_exec(*req, cgroup_fds);
    if (!spawned) {
      (void)send_message(config_.control_fd,
                         message(MessageType::exec_error, {{"id", req->id},
                                                           {"step", to_string(spawned.error().step)},
                                                           {"errno", spawned.error().err}}));
      return;
    }
    execs_[spawned->pid] = req->id;
    (void)send_message(config_.control_fd, message(MessageType::started, {{"id", req->id}, {"pid", spawned->pid}}),
                       {spawned->stdin_w.get(), spawned->stdout_r.get(), spawned->stderr_r.get()});
  }

  // The port proxy's socket: created here, in the session's network namespace, and
  // handed over unconnected; the host connects it (non-blocking, on its own loop), so
  // init never waits on a port. Its buffers are charged to init's cgroup: the session's.
  void open_socket(const json::object& body) {
    auto* ref = body.if_contains("ref");
    uint64_t id = ref && ref->is_number() ? ref->to_number<uint64_t>() : 0;
    UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    int err = sock ? 0 : errno;
    std::vector<int> fds;
    if (sock) fds.push_back(sock.get());
    (void)send_message(config_.control_fd, message(MessageType::socket, {{"ref", id}, {"errno", err}}), fds);
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

  UniqueFd door;
  if (config.door_port) {
    auto opened = open_door(config.door_port);
    if (!opened) setup_failed(config.control_fd, opened.error());
    door = std::move(*opened);
  }

  int signal_fd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) setup_failed(config.control_fd, Error{ErrorCode::system, errno, "signalfd"});
  std::vector<int> ready_fds;
  if (door) ready_fds.push_back(door.get());
  // Only the control socket and the signalfd stay open in init (the door goes with
  // `ready`, then closes here too).
  int keep_door = door.get();
  int low = std::min(config.control_fd, signal_fd), high = std::max(config.control_fd, signal_fd);
  auto close_except = [&](unsigned from, unsigned to) {  // [from, to], sparing the door until it is sent
    if (from > to) return;
    if (keep_door >= 0 && unsigned(keep_door) >= from && unsigned(keep_door) <= to) {
      if (unsigned(keep_door) > from) ::syscall(SYS_close_range, from, keep_door - 1, 0);
      if (unsigned(keep_door) < to) ::syscall(SYS_close_range, keep_door + 1, to, 0);
    } else {
      ::syscall(SYS_close_range, from, to, 0);
    }
  };
  close_except(3, low - 1);
  close_except(low + 1, high - 1);
  close_except(high + 1, ~0U);
  if (int err = prepare_init_for_execs())
    setup_failed(config.control_fd, Error{ErrorCode::system, err, "prepare init for execs"});
  // The policy, installed on init itself once its setup (mounts, namespaces, the
  // door) is done: every exec forks from here under it, so none loads a filter of its
  // own, and init keeps to the same table (it needs nothing the table denies). With a
  // watch, its listener goes to the host with ready, first, then the door; init keeps
  // no copy of it: only the host answers.
  UniqueFd listener;
  if (config.listener) {
    auto installed = install_seccomp_with_listener(*config.seccomp);
    if (!installed) setup_failed(config.control_fd, installed.error());
    listener = std::move(*installed);
    ready_fds.insert(ready_fds.begin(), listener.get());
  } else if (int err = install_seccomp(*config.seccomp)) {
    setup_failed(config.control_fd, Error{ErrorCode::system, err, "install the seccomp policy"});
  }
  if (auto r = send_message(config.control_fd, message(MessageType::ready), ready_fds); !r) ::_exit(1);
  listener.reset();
  door.reset();
  Init(config, signal_fd).serve();
}

void run_init_reexec(int control_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  // execveat of an fd names the process after the fd number: give it its name first.
  ::prctl(PR_SET_NAME, kInitArgv0, 0, 0, 0);
  auto msg = recv_message(control_fd);
  if (!msg) ::_exit(1);
  if (msg->type() != MessageType::config) setup_failed(control_fd, Error{ErrorCode::internal, 0, "expected config message"});
  // The host side compiled the program and sent it as a sealed memfd.
  if (msg->fds.size() != 1) setup_failed(control_fd, Error{ErrorCode::internal, 0, "config message without the seccomp program"});
  static SeccompProgram seccomp;
  auto program = read_seccomp_program(msg->fds[0].get());
  if (!program) setup_failed(control_fd, program.error());
  seccomp = std::move(*program);
  msg->fds.clear();
  static InitConfig config;
  try {
    config.control_fd = control_fd;
    config.hostname = std::string(msg->body.at("hostname").as_string());
    config.rootfs.shm_bytes = msg->body.at("shm_bytes").to_number<uint64_t>();
    config.rootfs.pty_max = msg->body.at("pty_max").to_number<uint32_t>();
    if (auto* port = msg->body.if_contains("door_port")) config.door_port = port->to_number<uint16_t>();
    config.seccomp = &seccomp;
    if (auto* n = msg->body.if_contains("listener"); n && n->is_bool()) config.listener = n->as_bool();
  } catch (const std::exception& e) {
    setup_failed(control_fd, Error{ErrorCode::internal, 0, std::string("bad config message: ") + e.what()});
  }
  run_init(config);
}

}  // namespace cela::agent
