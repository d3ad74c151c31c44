// The host-wide admission ledger (session/host_ledger.h): processes sharing a ledger
// directory see each other's grants, dead holders and recycled pids do not count, and
// admits under the flock never pass the limit together. Each holder is a process of its
// own (the ledger names holders by pid), so the tests fork.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "session/host_ledger.h"

namespace cela::session {
namespace {

using namespace std::chrono_literals;
constexpr uint64_t kMax = UINT64_MAX;

class HostLedgerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string base = std::getenv("CELA_LEDGER_TEST_TMP") ? std::getenv("CELA_LEDGER_TEST_TMP") : "/tmp";
    std::string t = base + "/cela-ledger-XXXXXX";
    std::vector<char> tmpl(t.begin(), t.end());
    tmpl.push_back(0);
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl.data();
  }
  void TearDown() override {
    for (pid_t pid : children_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }

  // A child process running `body` (its exit code: what body returns); pipes to talk.
  struct Child {
    pid_t pid = -1;
    int to = -1, from = -1;  // our ends: write to it, read from it
    char read() const {
      char c = 0;
      return ::read(from, &c, 1) == 1 ? c : '\0';
    }
    void write(char c) const { ASSERT_EQ(::write(to, &c, 1), 1); }
  };
  template <class Body>
  Child fork_child(Body body) {
    int down[2], up[2];
    EXPECT_EQ(::pipe(down), 0);
    EXPECT_EQ(::pipe(up), 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(down[1]);
      ::close(up[0]);
      int rc = body(down[0], up[1]);
      ::_exit(rc);
    }
    ::close(down[0]);
    ::close(up[1]);
    children_.push_back(pid);
    return {pid, down[1], up[0]};
  }
  int reap(const Child& c) {
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    std::erase(children_, c.pid);
    ::close(c.to);
    ::close(c.from);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  static char child_read(int fd) {
    char c = 0;
    return ::read(fd, &c, 1) == 1 ? c : '\0';
  }
  static void child_write(int fd, char c) { (void)!::write(fd, &c, 1); }

  std::string dir_;
  std::vector<pid_t> children_;
};

const HostGrant kLimit{1000, 100, 10000};

TEST_F(HostLedgerTest, TwoLedgersInOneDirSeeEachOthersGrants) {
  Child other = fork_child([&](int in, int out) {
    auto ledger = HostLedger::open(dir_);
    if (!ledger) return 1;
    if (!(*ledger)->take({600, 10, 100}, kLimit)) return 2;
    child_write(out, 'T');
    child_read(in);  // hold until told
    (*ledger)->give_back({600, 10, 100});
    child_write(out, 'G');
    child_read(in);
    return 0;
  });
  ASSERT_EQ(other.read(), 'T');
  // A scan interval far longer than the test: only the lock file's totals can tell us
  // the other changed.
  auto ledger = HostLedger::open(dir_, std::chrono::hours(1));
  ASSERT_TRUE(ledger) << ledger.error().message();
  auto others = (*ledger)->others();
  ASSERT_TRUE(others) << others.error().message();
  EXPECT_EQ(*others, (HostGrant{600, 10, 100}));

  ASSERT_TRUE((*ledger)->take({300, 10, 100}, kLimit));
  auto refused = (*ledger)->take({200, 1, 1}, kLimit);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::capacity_exceeded);
  EXPECT_NE(refused.error().message().find("MiB of session memory"), std::string::npos) << refused.error().message();
  EXPECT_NE(refused.error().message().find("600 of them held by other cela processes"), std::string::npos)
      << refused.error().message();
  EXPECT_NE(refused.error().message().find(dir_), std::string::npos) << refused.error().message();
  EXPECT_EQ((*ledger)->mine(), (HostGrant{300, 10, 100}));

  other.write('g');
  ASSERT_EQ(other.read(), 'G');
  // The other's give-back left the totals in the same turn of the lock.
  EXPECT_TRUE((*ledger)->take({600, 10, 100}, kLimit));
  other.write('x');
  EXPECT_EQ(reap(other), 0);
}

// Whoever holds the lock file's flock stalls every admit: only root may open it, and
// an admit waits a bounded time, then refuses (capacity_exceeded), never hangs.
TEST_F(HostLedgerTest, AStuckLockHolderCostsABoundedWaitAndOnlyRootMayOpenTheLock) {
  auto ledger = HostLedger::open(dir_);
  ASSERT_TRUE(ledger) << ledger.error().message();
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  int fd = ::open((dir_ + "/.lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);  // a flock of another open file: as another process's would be
  auto began = std::chrono::steady_clock::now();
  auto refused = (*ledger)->take({1, 1, 1}, {kMax, kMax, kMax});
  auto waited = std::chrono::steady_clock::now() - began;
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::capacity_exceeded);
  EXPECT_NE(refused.error().message().find("stayed locked"), std::string::npos) << refused.error().message();
  EXPECT_GE(waited, 200ms);
  EXPECT_LT(waited, 2s);
  ::flock(fd, LOCK_UN);
  ::close(fd);
  EXPECT_TRUE((*ledger)->take({1, 1, 1}, {kMax, kMax, kMax}));
}

TEST_F(HostLedgerTest, DeadHoldersAreIgnoredAndRemoved) {
  std::string name;
  Child dead = fork_child([&](int, int out) {
    auto ledger = HostLedger::open(dir_);
    if (!ledger || !(*ledger)->take({900, 90, 9000}, kLimit)) return 1;
    child_write(out, 'T');
    ::_exit(0);  // no destructor: the file stays, as after a crash
  });
  ASSERT_EQ(dead.read(), 'T');
  ASSERT_EQ(reap(dead), 0);
  size_t files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_))
    if (e.path().filename().string().starts_with(std::to_string(dead.pid) + "-")) ++files;
  ASSERT_EQ(files, 1u) << "the dead holder's file should be there before a read";
  std::ofstream(dir_ + "/README") << "not a holder's file\n";

  auto ledger = HostLedger::open(dir_);
  ASSERT_TRUE(ledger);
  EXPECT_TRUE((*ledger)->take({900, 90, 9000}, kLimit)) << "a dead holder's grant still counted";
  for (auto& e : std::filesystem::directory_iterator(dir_))
    EXPECT_FALSE(e.path().filename().string().starts_with(std::to_string(dead.pid) + "-"))
        << e.path() << " of a dead holder was left";
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/README")) << "a file no holder wrote was touched";
}

TEST_F(HostLedgerTest, ARecycledPidDoesNotCount) {
  // pid 1 is alive; a file naming it with another start time is an earlier process
  // that had the same pid.
  auto init = HostLedger::holder_of(1);
  ASSERT_TRUE(init) << init.error().message();
  std::string stale = dir_ + "/1-" + std::to_string(init->start + 12345);
  std::ofstream(stale) << "900 90 9000\n1000 100 10000\n";
  // The same pid with its true start time counts, and its stricter limit applies.
  std::string live = dir_ + "/1-" + std::to_string(init->start);
  std::ofstream(live) << "100 1 1\n500 100 10000\n";

  auto ledger = HostLedger::open(dir_);
  ASSERT_TRUE(ledger);
  auto others = (*ledger)->others();
  ASSERT_TRUE(others);
  EXPECT_EQ(*others, (HostGrant{100, 1, 1}));
  EXPECT_FALSE(std::filesystem::exists(stale)) << "the recycled pid's file was kept";
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE((*ledger)->take({400, 1, 1}, kLimit));
  auto refused = (*ledger)->take({1, 1, 1}, kLimit);
  ASSERT_FALSE(refused) << "the other holder's stricter limit (500 MiB) was not applied";
  EXPECT_NE(refused.error().message().find("the host's 500"), std::string::npos) << refused.error().message();
  std::filesystem::remove(live);
}

TEST_F(HostLedgerTest, ConcurrentAdmitsUnderTheLockNeverPassTheLimit) {
  constexpr int kChildren = 8, kTries = 20;
  const HostGrant limit{50, kMax, kMax};
  std::vector<Child> children;
  for (int i = 0; i < kChildren; ++i)
    children.push_back(fork_child([&](int in, int out) {
      auto ledger = HostLedger::open(dir_);
      if (!ledger) return 255;
      child_read(in);  // all start together
      int taken = 0;
      for (int t = 0; t < kTries; ++t)
        if ((*ledger)->take({1, 0, 0}, limit)) ++taken;
      child_write(out, static_cast<char>(taken));
      child_read(in);  // hold the grants until the parent has counted
      return 0;
    }));
  for (auto& c : children) c.write('g');
  int total = 0;
  for (auto& c : children) total += static_cast<unsigned char>(c.read());
  EXPECT_EQ(total, 50) << "admits together passed (or fell short of) the limit";
  auto ledger = HostLedger::open(dir_);
  ASSERT_TRUE(ledger);
  auto others = (*ledger)->others();
  ASSERT_TRUE(others);
  EXPECT_EQ(others->memory_mb, 50u);
  EXPECT_FALSE((*ledger)->take({1, 0, 0}, limit));
  for (auto& c : children) {
    c.write('x');
    EXPECT_EQ(reap(c), 0);
  }
  EXPECT_TRUE((*ledger)->take({50, 0, 0}, limit)) << "holders that ended still counted";
}

// Not a check: the cost of one admit (take + give_back) with 32 live holders in the
// directory, with the lock file's totals and with a scan of the directory every time.
// Run (CELA_LEDGER_TEST_TMP: where the ledger dir is made, /tmp by default):
//   CELA_LEDGER_TEST_TMP=/dev/shm build/tests/cela_unit_tests --gtest_filter='HostLedgerTest.CostPerAdmit'
TEST_F(HostLedgerTest, CostPerAdmit) {
  // Live holders: children of this test, each holding a grant until told.
  std::vector<Child> holders;
  for (int i = 0; i < 32; ++i)
    holders.push_back(fork_child([&](int in, int out) {
      auto ledger = HostLedger::open(dir_);
      if (!ledger || !(*ledger)->take({1, 1, 1}, kLimit)) return 1;
      child_write(out, 'T');
      child_read(in);
      return 0;
    }));
  for (auto& h : holders) ASSERT_EQ(h.read(), 'T');
  for (auto cache : {std::chrono::milliseconds(250), std::chrono::milliseconds(0)}) {
    auto ledger = HostLedger::open(dir_, cache);
    ASSERT_TRUE(ledger);
    constexpr int kRounds = 2000;
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kRounds; ++i) {
      ASSERT_TRUE((*ledger)->take({1, 1, 1}, kLimit));
      (*ledger)->give_back({1, 1, 1});
    }
    double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kRounds;
    std::printf("host ledger, 32 other holders, cache %lld ms: %.1f us per admit (take + give_back)\n",
                static_cast<long long>(cache.count()), us);
  }
  for (auto& h : holders) {
    h.write('x');
    EXPECT_EQ(reap(h), 0);
  }
}

}  // namespace
}  // namespace cela::session
