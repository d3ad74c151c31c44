// The control protocol between the host side (runner or daemon) and a sandbox's init.
//
// Transport: a SOCK_SEQPACKET socketpair, one message per packet, so message
// boundaries come from the kernel. Each message is a JSON object with a "type";
// file descriptors travel alongside with SCM_RIGHTS (the exec's stdio pipe ends).
//
// host -> init:  config {hostname, shm_bytes, pty_max, listener?, door_port}  first, with the
//                                          seccomp program (memfd), which init installs on
//                                          itself before ready (with a listener: listener)
//                maps {} + fds             id maps written: join the cgroups (fds),
//                                          become ns root, set up namespaces
//                rootfs {binds} + fds      the overlay and bind mounts to enter
//                exec {id, argv, env, cwd, uid, gid, nofile, fsize, no_new_privs,
//                      tty?, cols?, rows?}
//                     + fds                optional: cgroup files the exec joins
//                                          by writing "0" (per-exec cgroups); with
//                                          tty, the exec runs on a pty of the
//                                          sandbox's own devpts
//                signal {id, signal}       signal an exec's process group
//                shutdown {}               kill everything, exit
//                open_socket {ref}         a TCP socket in the sandbox's network namespace
//                                          (the port proxy: the host connects it to a port
//                                          on the sandbox's loopback)
// init -> host:  ready {} [+ fds]          root is assembled, execs can start; with
//                                          listener, the policy's listener (jail/exec_notify.h),
//                                          then with a door_port the door's listening socket
//                setup_error {step, errno} setup failed; init exits
//                started {id, pid} + fds [stdin write end, stdout read, stderr read]
//                                          (a tty exec: [pty master, the same master,
//                                          an empty pipe's read end])
//                exec_error {id, step, errno}  the exec did not start (step: ExecStep)
//                exited {id, status}       wait status of the exec's main process
//                socket {ref, errno} [+ fd] the socket open_socket asked for (errno 0),
//                                          or why there is none
//
// The same protocol serves `cela run` (one exec) and the daemon (many execs per
// session), which is why init starts execs on request instead of at boot.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace cela::agent {

inline constexpr size_t kMaxMessageBytes = 256 * 1024;
inline constexpr size_t kMaxMessageFds = 8;

// Every message type of the protocol, on the wire by name (to_string).
enum class MessageType {
  config, maps, rootfs, exec, signal, shutdown,  // host -> init
  ready, setup_error, started, exec_error, exited,  // init -> host
  open_socket, socket,                              // the port proxy (host -> init, init -> host)
  unknown,
};
std::string_view to_string(MessageType type);
MessageType message_type(std::string_view name);

// The steps an exec can fail at before its execve succeeds, shared by both ends (the
// host words the failure from the step: ENOENT at execve is "command not found").
enum class ExecStep { request, pipe, cgroup, oom_score, setsid, stdio, rlimit, caps, ids, chdir, no_new_privs,
                      execve, pty, unknown };
std::string_view to_string(ExecStep step);
ExecStep exec_step(std::string_view name);

struct Message {
  boost::json::object body;
  std::vector<UniqueFd> fds;
  // The receiver had no room for every descriptor sent (it is at its RLIMIT_NOFILE: the
  // kernel dropped the rest, MSG_CTRUNC); `fds` holds those that arrived.
  bool fds_truncated = false;

  MessageType type() const;
};

// A message of `type` with its fields: message(MessageType::signal, {{"id", 3}, ...}).
boost::json::object message(MessageType type, boost::json::object fields = {});

// Sends one message (with `fds`, not taken) on a SOCK_SEQPACKET socket.
Result<void> send_message(int sock, const boost::json::object& body, const std::vector<int>& fds = {});

// Receives one message. EOF (peer gone) is ErrorCode::not_found with context "eof". A
// message whose descriptors did not all fit is ErrorCode::limit, unless
// `keep_short_fds`: then it is returned whole with fds_truncated set, for a receiver
// that can still act on it (fail that one exec rather than lose the channel).
Result<Message> recv_message(int sock, bool keep_short_fds = false);
bool is_eof(const Error& error);

// A request to start a process inside the sandbox.
struct ExecRequest {
  uint64_t id = 0;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V", the complete environment
  std::string cwd = "/";
  uint32_t uid = 0;  // inside the sandbox
  uint32_t gid = 0;
  uint64_t nofile = 4096;
  uint64_t fsize_bytes = 0;  // RLIMIT_FSIZE; 0 = unlimited
  bool no_new_privs = true;
  // On a pty (session leader, the pty its controlling terminal, stdio on the slave).
  bool tty = false;
  uint16_t cols = 80, rows = 24;

  boost::json::object to_json() const;
  static Result<ExecRequest> from_json(const boost::json::object& body);
};

}  // namespace cela::agent
