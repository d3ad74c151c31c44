#include "agent/protocol.h"

#include <fcntl.h>
#include <gtest/gtest.h>
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
