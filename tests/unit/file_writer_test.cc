// The file writer (jail/file_writer.h): what it can still do once it copies, how its end
// is judged, and the early refusal of an upload that cannot fit (session/upload.h).
// The spawn tests need root (they drop to an unprivileged uid) and skip without it.
#include "jail/file_writer.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "session/upload.h"

using namespace cela;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kUid = 101000;
constexpr gid_t kGid = 101001;

std::string status_field(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) {
      std::string v = line.substr(key.size() + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "";
}

bool wait_readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1;
}

class FileWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    dir_ = fs::temp_directory_path() / ("cela-writer-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  UniqueFd open_dest(const std::string& name) {
    return UniqueFd(::open((dir_ / name).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  }
  fs::path dir_;
};

TEST_F(FileWriterTest, CopiesItsInputIntoTheFile) {
  jail::CgroupEntry none;  // stays in the test's own cgroup
  auto w = jail::spawn_file_writer(none, open_dest("out"), kUid, kGid);
  ASSERT_TRUE(w) << w.error().message();
  std::string data;
  for (int i = 0; i < 5000; ++i) data += "line " + std::to_string(i) + "\n";
  ASSERT_EQ(::write(w->input.get(), data.data(), data.size()), static_cast<ssize_t>(data.size()));
  w->input.reset();
  ASSERT_TRUE(wait_readable(w->pidfd.get(), 5000));
  auto r = jail::reap_file_writer(w->pidfd.get());
  ASSERT_TRUE(r) << r.error().message();
  std::ifstream in(dir_ / "out", std::ios::binary);
  std::stringstream got;
  got << in.rdbuf();
  EXPECT_EQ(got.str(), data);
}

// Once copying, the writer is an unprivileged, non-dumpable process in seccomp strict
// mode holding only its three descriptors, the first OOM victim of its memory cgroup.
TEST_F(FileWriterTest, RunsWithNothingButItsThreeDescriptors) {
  jail::CgroupEntry none;
  auto w = jail::spawn_file_writer(none, open_dest("out"), kUid, kGid);
  ASSERT_TRUE(w) << w.error().message();
  // One byte through proves the copy loop (after every setup step) is running.
  ASSERT_EQ(::write(w->input.get(), "x", 1), 1);
  auto size = [&] { return fs::file_size(dir_ / "out"); };
  for (int i = 0; i < 200 && size() == 0; ++i) ::usleep(10000);
  ASSERT_EQ(size(), 1u);
  pid_t pid = w->pid;
  EXPECT_EQ(status_field(pid, "Uid"), "101000\t101000\t101000\t101000");
  EXPECT_EQ(status_field(pid, "Gid"), "101001\t101001\t101001\t101001");
  EXPECT_EQ(status_field(pid, "Groups"), "");
  EXPECT_EQ(status_field(pid, "CapEff"), "0000000000000000");
  EXPECT_EQ(status_field(pid, "CapPrm"), "0000000000000000");
  EXPECT_EQ(status_field(pid, "NoNewPrivs"), "1");
  EXPECT_EQ(status_field(pid, "Seccomp"), "1");  // strict
  std::ifstream oom("/proc/" + std::to_string(pid) + "/oom_score_adj");
  int adj = 0;
  oom >> adj;
  EXPECT_EQ(adj, 1000);
  std::vector<std::string> fds;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd"))
    fds.push_back(e.path().filename());
  std::sort(fds.begin(), fds.end());
  EXPECT_EQ(fds, (std::vector<std::string>{"0", "1", "2"}));  // 2: its status pipe
  w->input.reset();
  ASSERT_TRUE(wait_readable(w->pidfd.get(), 5000));
  EXPECT_TRUE(jail::reap_file_writer(w->pidfd.get()));
}

TEST_F(FileWriterTest, AFullDiskIsALimitError) {
  jail::CgroupEntry none;
  UniqueFd full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
  ASSERT_TRUE(full);
  auto w = jail::spawn_file_writer(none, std::move(full), kUid, kGid);
  ASSERT_TRUE(w) << w.error().message();
  (void)::write(w->input.get(), "data", 4);
  w->input.reset();
  // Its status byte says so before its exit.
  ASSERT_TRUE(wait_readable(w->status.get(), 5000));
  bool reaped = false;
  auto r = jail::file_writer_result(w->status.get(), w->pidfd.get(), reaped);
  ASSERT_FALSE(r);
  EXPECT_FALSE(reaped);
  EXPECT_EQ(r.error().code, ErrorCode::limit);
  EXPECT_EQ(r.error().err, ENOSPC);
  ASSERT_TRUE(wait_readable(w->pidfd.get(), 5000));
  EXPECT_FALSE(jail::reap_file_writer(w->pidfd.get()));
}

TEST_F(FileWriterTest, AKilledWriterIsReapedToSayWhy) {
  jail::CgroupEntry none;
  auto w = jail::spawn_file_writer(none, open_dest("out"), kUid, kGid);
  ASSERT_TRUE(w) << w.error().message();
  ASSERT_EQ(::kill(w->pid, SIGKILL), 0);
  ASSERT_TRUE(wait_readable(w->status.get(), 5000));  // EOF, no byte
  bool reaped = false;
  auto r = jail::file_writer_result(w->status.get(), w->pidfd.get(), reaped);
  ASSERT_FALSE(r);
  EXPECT_TRUE(reaped);
  EXPECT_EQ(r.error().code, ErrorCode::limit);
}

TEST_F(FileWriterTest, NeverRunsAsRoot) {
  jail::CgroupEntry none;
  auto w = jail::spawn_file_writer(none, open_dest("out"), 0, kGid);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, ErrorCode::internal);
}

TEST(FileWriterOutcome, JudgesHowTheWriterEnded) {
  EXPECT_TRUE(jail::file_writer_outcome(0));
  auto killed = jail::file_writer_outcome(SIGKILL);  // a signalled wait status
  ASSERT_FALSE(killed);
  EXPECT_EQ(killed.error().code, ErrorCode::limit);
  EXPECT_NE(killed.error().context.find("memory"), std::string::npos);
  auto nospace = jail::file_writer_outcome(ENOSPC << 8);
  ASSERT_FALSE(nospace);
  EXPECT_EQ(nospace.error().code, ErrorCode::limit);
  EXPECT_NE(nospace.error().context.find("disk is full"), std::string::npos);
  auto io = jail::file_writer_outcome(EIO << 8);
  ASSERT_FALSE(io);
  EXPECT_EQ(io.error().code, ErrorCode::system);
  EXPECT_EQ(io.error().err, EIO);
  EXPECT_EQ(jail::file_writer_outcome(200 << 8).error().code, ErrorCode::gone);
  EXPECT_EQ(jail::file_writer_outcome(201 << 8).error().code, ErrorCode::internal);
}

TEST(UploadRoom, RefusesWhatCannotFit) {
  using session::check_room;
  session::UploadRoom room{100, 50};
  EXPECT_TRUE(check_room(50, room));
  auto memory = check_room(51, room);
  ASSERT_FALSE(memory);
  EXPECT_EQ(memory.error().code, ErrorCode::limit);
  EXPECT_NE(memory.error().context.find("50 bytes of memory free"), std::string::npos);
  auto disk = check_room(101, room);
  ASSERT_FALSE(disk);
  EXPECT_NE(disk.error().context.find("100 bytes of disk free"), std::string::npos);
  EXPECT_TRUE(check_room(100, session::UploadRoom{100, std::nullopt}));  // no memory limit
  EXPECT_TRUE(check_room(0, session::UploadRoom{0, 0}));
}

void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// The archive helper's own headroom, on a fake cgroupfs of either layout.
TEST(MemoryHeadroom, ReadsTheCgroupTheProcessIsIn) {
  fs::path root = fs::temp_directory_path() / ("cela-headroom-" + std::to_string(::getpid()));
  // v1 (legacy or hybrid): the memory hierarchy's line.
  write_text(root / "v1/memory/cela/s-1/memory.limit_in_bytes", "33554432\n");
  write_text(root / "v1/memory/cela/s-1/memory.usage_in_bytes", "8388608\n");
  const std::string v1_self = "12:pids:/cela/s-1\n4:memory:/cela/s-1\n0::/cela/s-1\n";
  EXPECT_EQ(session::memory_headroom(v1_self, (root / "v1").string()), 25165824u);
  // v2: the unified line; "max" is no limit.
  write_text(root / "v2/cela/s-2/memory.max", "16777216\n");
  write_text(root / "v2/cela/s-2/memory.current", "20000000\n");
  EXPECT_EQ(session::memory_headroom("0::/cela/s-2\n", (root / "v2").string()), 0u);  // over: none left
  write_text(root / "v2/cela/s-3/memory.max", "max\n");
  write_text(root / "v2/cela/s-3/memory.current", "1\n");
  EXPECT_EQ(session::memory_headroom("0::/cela/s-3\n", (root / "v2").string()), std::nullopt);
  EXPECT_EQ(session::memory_headroom("0::/nowhere\n", (root / "v2").string()), std::nullopt);
  fs::remove_all(root);
}

}  // namespace
