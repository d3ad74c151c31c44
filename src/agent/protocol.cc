#include "agent/protocol.h"

#include <sys/socket.h>

#include <boost/json.hpp>
#include <cstring>

namespace cela::agent {
namespace json = boost::json;

namespace {
constexpr std::string_view kTypeNames[] = {"config", "maps",        "rootfs",  "exec",       "signal", "shutdown",
                                           "ready",  "setup_error", "started", "exec_error", "exited", "open_socket",
                                           "socket", "unknown"};
constexpr std::string_view kStepNames[] = {"request", "pipe",    "join cgroup",  "oom score", "setsid",  "stdio",
                                           "rlimit", "capabilities", "set ids", "chdir", "no_new_privs",
                                           "execve", "pty", "unknown"};
}  // namespace

std::string_view to_string(MessageType type) { return kTypeNames[static_cast<size_t>(type)]; }

MessageType message_type(std::string_view name) {
  for (size_t i = 0; i < std::size(kTypeNames); ++i)
    if (kTypeNames[i] == name) return static_cast<MessageType>(i);
  return MessageType::unknown;
}

std::string_view to_string(ExecStep step) { return kStepNames[static_cast<size_t>(step)]; }

ExecStep exec_step(std::string_view name) {
  for (size_t i = 0; i < std::size(kStepNames); ++i)
    if (kStepNames[i] == name) return static_cast<ExecStep>(i);
  return ExecStep::unknown;
}

MessageType Message::type() const {
  auto* t = body.if_contains("type");
  return t && t->is_string() ? message_type(t->as_string()) : MessageType::unknown;
}

json::object message(MessageType type, json::object fields) {
  fields["type"] = to_string(type);
  return fields;
}

Result<void> send_message(int sock, const json::object& body, const std::vector<int>& fds) {
  std::string text = json::serialize(body);
  if (text.size() > kMaxMessageBytes) return fail(ErrorCode::limit, "control message too large");
  if (fds.size() > kMaxMessageFds) return fail(ErrorCode::internal, "too many fds in one message");
  iovec iov{text.data(), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)];
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* cm = CMSG_FIRSTHDR(&msg);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(cm), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return {};
    if (errno != EINTR) return sys_fail("send control message");
  }
}

Result<Message> recv_message(int sock, bool keep_short_fds) {
  std::string buf(kMaxMessageBytes, '\0');
  iovec iov{buf.data(), buf.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxMessageFds)];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  while (n < 0 && errno == EINTR);
  if (n < 0) return sys_fail("receive control message");
  Message out;
  for (cmsghdr* cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof fd);
      out.fds.emplace_back(fd);
    }
  }
  if (n == 0) return fail(ErrorCode::not_found, "eof");
  if (msg.msg_flags & MSG_TRUNC) return fail(ErrorCode::limit, "control message truncated");
  if (msg.msg_flags & MSG_CTRUNC) {
    // The buffer holds kMaxMessageFds: what the kernel dropped, it had no descriptor
    // for in this process (RLIMIT_NOFILE). Retryable, like any other descriptor shortage.
    if (!keep_short_fds)
      return fail(ErrorCode::capacity_exceeded, "control message truncated: out of file descriptors");
    out.fds_truncated = true;
  }
  buf.resize(static_cast<size_t>(n));
  boost::system::error_code ec;
  json::value v = json::parse(buf, ec);
  if (ec || !v.is_object()) return fail(ErrorCode::internal, "malformed control message");
  out.body = std::move(v.as_object());
  return out;
}

bool is_eof(const Error& error) { return error.code == ErrorCode::not_found && error.context == "eof"; }

json::object ExecRequest::to_json() const {
  json::array a, e;
  for (auto& s : argv) a.emplace_back(s);
  for (auto& s : env) e.emplace_back(s);
  return {{"type", to_string(MessageType::exec)},   {"id", id},         {"argv", a},
          {"env", e},         {"cwd", cwd},       {"uid", uid},
          {"gid", gid},       {"nofile", nofile}, {"fsize", fsize_bytes},
          {"no_new_privs", no_new_privs}, {"tty", tty},       {"cols", cols},
          {"rows", rows}};
}

Result<ExecRequest> ExecRequest::from_json(const json::object& body) {
  try {
    ExecRequest r;
    r.id = json::value_to<uint64_t>(body.at("id"));
    for (auto& v : body.at("argv").as_array()) r.argv.emplace_back(v.as_string());
    for (auto& v : body.at("env").as_array()) r.env.emplace_back(v.as_string());
    r.cwd = std::string(body.at("cwd").as_string());
    r.uid = json::value_to<uint32_t>(body.at("uid"));
    r.gid = json::value_to<uint32_t>(body.at("gid"));
    r.nofile = json::value_to<uint64_t>(body.at("nofile"));
    r.fsize_bytes = json::value_to<uint64_t>(body.at("fsize"));
    r.no_new_privs = body.at("no_new_privs").as_bool();
    if (auto* t = body.if_contains("tty")) r.tty = t->as_bool();
    if (auto* c = body.if_contains("cols")) r.cols = json::value_to<uint16_t>(*c);
    if (auto* w = body.if_contains("rows")) r.rows = json::value_to<uint16_t>(*w);
    if (r.argv.empty()) return fail(ErrorCode::invalid_argument, "exec without argv");
    return r;
  } catch (const std::exception& e) {
    return fail(ErrorCode::invalid_argument, std::string("malformed exec request: ") + e.what());
  }
}

}  // namespace cela::agent
