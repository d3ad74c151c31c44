#include "agent/protocol.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

using namespace cela;
using namespace cela::agent;

namespace {
struct Pair {
  UniqueFd a, b;
  Pair() {
    int fds[2];
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0);
    a.reset(fds[0]);
    b.reset(fds[1]);
  }
};
}  // namespace

TEST(Protocol, ExecRequestRoundTripsWithFds) {
  Pair p;
  ExecRequest req;
  req.id = 7;
  req.argv = {"python3", "-c", "print('hi')"};
  req.env = {"PATH=/usr/bin", "A=b=c"};
  req.cwd = "/home/user";
  req.uid = req.gid = 1000;
  req.fsize_bytes = 1 << 20;
  req.no_new_privs = false;
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  ASSERT_TRUE(send_message(p.a.get(), req.to_json(), {pipefd[1]}).has_value());
  ::close(pipefd[1]);
  auto msg = recv_message(p.b.get());
  ASSERT_TRUE(msg.has_value());
  EXPECT_EQ(msg->type(), MessageType::exec);
  ASSERT_EQ(msg->fds.size(), 1u);
  auto back = ExecRequest::from_json(msg->body);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->argv, req.argv);
  EXPECT_EQ(back->env, req.env);
  EXPECT_EQ(back->cwd, req.cwd);
  EXPECT_EQ(back->uid, 1000u);
  EXPECT_EQ(back->fsize_bytes, 1u << 20);
  EXPECT_FALSE(back->no_new_privs);
  // The received fd is a working duplicate of the pipe's write end.
  ASSERT_EQ(::write(msg->fds[0].get(), "x", 1), 1);
  char c;
  EXPECT_EQ(::read(pipefd[0], &c, 1), 1);
  ::close(pipefd[0]);
}

TEST(Protocol, EofIsReportedAsEof) {
  Pair p;
  p.a.reset();
  auto msg = recv_message(p.b.get());
  ASSERT_FALSE(msg.has_value());
  EXPECT_TRUE(is_eof(msg.error()));
}

TEST(Protocol, MalformedMessagesAreRejected) {
  Pair p;
  ASSERT_EQ(::send(p.a.get(), "{not json", 9, 0), 9);
  EXPECT_FALSE(recv_message(p.b.get()).has_value());
  ASSERT_EQ(::send(p.a.get(), "[1,2]", 5, 0), 5);
  EXPECT_FALSE(recv_message(p.b.get()).has_value());
  boost::json::object bad{{"type", "exec"}, {"id", 1}, {"argv", boost::json::array{}}};
  EXPECT_FALSE(ExecRequest::from_json(bad).has_value());
  boost::json::object wrong_type{{"type", "exec"}, {"id", "x"}};
  EXPECT_FALSE(ExecRequest::from_json(wrong_type).has_value());
}

TEST(Protocol, MessageTypesAndStepsAreTypedOnBothEnds) {
  // Every type and step survives its wire name; unknown names are `unknown`, never a
  // silent match of some other value.
  for (int i = 0; i <= static_cast<int>(MessageType::unknown); ++i) {
    auto t = static_cast<MessageType>(i);
    EXPECT_EQ(message_type(to_string(t)), t);
  }
  for (int i = 0; i <= static_cast<int>(ExecStep::unknown); ++i) {
    auto s = static_cast<ExecStep>(i);
    EXPECT_EQ(exec_step(to_string(s)), s);
  }
  EXPECT_EQ(message_type("exec "), MessageType::unknown);
  EXPECT_EQ(exec_step("EXECVE"), ExecStep::unknown);
  Pair p;
  ASSERT_TRUE(send_message(p.a.get(), message(MessageType::exited, {{"id", 7}, {"status", 0}})).has_value());
  auto msg = recv_message(p.b.get());
  ASSERT_TRUE(msg.has_value());
  EXPECT_EQ(msg->type(), MessageType::exited);
  EXPECT_EQ(msg->body.at("id").to_number<int>(), 7);
}

TEST(Protocol, DescriptorsTheReceiverHasNoRoomForAreReported) {
  Pair p;
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  auto started = message(MessageType::started, {{"id", 3}, {"pid", 9}});
  for (int i = 0; i < 2; ++i)
    ASSERT_TRUE(send_message(p.a.get(), started, {pipefd[0], pipefd[1], pipefd[1]}).has_value());
  ::close(pipefd[0]);
  ::close(pipefd[1]);
  // Room for one more descriptor only, as for a daemon at its RLIMIT_NOFILE.
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  int lowest_free = ::dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit low{static_cast<rlim_t>(lowest_free + 1), saved.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  auto strict = recv_message(p.b.get());
  auto kept = recv_message(p.b.get(), true);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  ASSERT_FALSE(strict.has_value());
  // A daemon out of descriptors answers 503 (retry), not 413 as for a message too long.
  EXPECT_EQ(strict.error().code, ErrorCode::capacity_exceeded);
  ASSERT_TRUE(kept.has_value()) << kept.error().message();
  EXPECT_TRUE(kept->fds_truncated);
  EXPECT_EQ(kept->fds.size(), 1u);
  EXPECT_EQ(kept->type(), MessageType::started);
  EXPECT_EQ(kept->body.at("id").to_number<int>(), 3);
  // With room, nothing is truncated.
  ASSERT_TRUE(send_message(p.a.get(), started, {0, 1, 2}).has_value());
  auto whole = recv_message(p.b.get(), true);
  ASSERT_TRUE(whole.has_value());
  EXPECT_FALSE(whole->fds_truncated);
  EXPECT_EQ(whole->fds.size(), 3u);
}
