// The sandbox side's pure parts: the PATH search of an exec, and the seccomp program
// as it travels to a re-executed init (a sealed memfd).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>

#include "agent/seccomp_program.h"
#include "agent/spawn.h"

namespace cela::agent {
namespace {

ExecRequest request(std::vector<std::string> argv, std::vector<std::string> env) {
  ExecRequest r;
  r.argv = std::move(argv);
  r.env = std::move(env);
  return r;
}

TEST(ExecCandidates, SlashMeansThePathItself) {
  EXPECT_EQ(exec_candidates(request({"./run.sh"}, {"PATH=/usr/bin"})), std::vector<std::string>{"./run.sh"});
  EXPECT_EQ(exec_candidates(request({"/bin/true"}, {})), std::vector<std::string>{"/bin/true"});
}

TEST(ExecCandidates, SearchesTheExecsOwnPathInOrder) {
  auto got = exec_candidates(request({"python3"}, {"HOME=/root", "PATH=/opt/venv/bin:/usr/bin"}));
  EXPECT_EQ(got, (std::vector<std::string>{"/opt/venv/bin/python3", "/usr/bin/python3"}));
}

TEST(ExecCandidates, EmptyEntryIsTheWorkingDirectory) {
  auto got = exec_candidates(request({"tool"}, {"PATH=/bin::/usr/bin"}));
  EXPECT_EQ(got, (std::vector<std::string>{"/bin/tool", "./tool", "/usr/bin/tool"}));
}

TEST(ExecCandidates, NoPathFallsBackToTheDefaultNotInitsEnvironment) {
  // A key that merely starts with PATH is not PATH.
  auto got = exec_candidates(request({"ls"}, {"PATHX=/evil"}));
  EXPECT_EQ(got, (std::vector<std::string>{"/usr/local/bin/ls", "/usr/bin/ls", "/bin/ls"}));
}

SeccompProgram sample_program() {
  SeccompProgram p;
  p.instructions.push_back(sock_filter{0x06, 0, 0, 0x7fff0000});  // ret ALLOW
  p.instructions.push_back(sock_filter{0x20, 0, 0, 4});
  return p;
}

TEST(SeccompProgramFd, RoundTripsThroughASealedMemfd) {
  auto fd = seal_seccomp_program(sample_program());
  ASSERT_TRUE(fd) << fd.error().message();
  auto back = read_seccomp_program(fd->get());
  ASSERT_TRUE(back) << back.error().message();
  ASSERT_EQ(back->instructions.size(), 2u);
  EXPECT_EQ(back->instructions[0].k, 0x7fff0000u);
  EXPECT_EQ(back->instructions[1].code, 0x20);
}

TEST(SeccompProgramFd, TheMemfdCannotBeChangedAfterSealing) {
  auto fd = seal_seccomp_program(sample_program());
  ASSERT_TRUE(fd);
  char byte = 0;
  EXPECT_EQ(::pwrite(fd->get(), &byte, 1, 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_NE(::ftruncate(fd->get(), 0), 0);
  EXPECT_EQ(::fcntl(fd->get(), F_GET_SEALS) & F_SEAL_SEAL, F_SEAL_SEAL);
}

TEST(SeccompProgramFd, RejectsMalformedBytes) {
  EXPECT_FALSE(seccomp_program_from_bytes(""));
  EXPECT_FALSE(seccomp_program_from_bytes("abc"));  // not a whole instruction
  EXPECT_TRUE(seccomp_program_from_bytes(std::string(sizeof(sock_filter), '\0')));
}

}  // namespace
}  // namespace cela::agent
