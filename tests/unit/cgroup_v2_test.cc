// The cgroup v2 backend against a fake cgroupfs: a temporary directory laid out like a
// cgroup2 mount. mkdir there creates no interface files, so the fixture creates them
// where the kernel would (make_node), and a FakeKernel thread plays the kernel's part
// in kill-all: a node whose cgroup.kill reads "1" loses its tasks and, so that rmdir
// can succeed on a plain filesystem, its files (cgroup.events last, so a reader that
// finds it gone also finds the directory empty). Also: host mode detection.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "jail/cgroup.h"

namespace cela::jail {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void put(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// Empties (as the kernel would after a kill) every node under cela/ whose cgroup.kill
// was written, and remembers which.
class FakeKernel {
 public:
  explicit FakeKernel(fs::path cela)
      : cela_(std::move(cela)), thread_([this](std::stop_token stop) { run(stop); }) {}

  std::set<std::string> killed() {
    std::lock_guard lock(mutex_);
    return killed_;
  }

 private:
  void run(const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      std::error_code ec;
      for (const auto& node : fs::directory_iterator(cela_, ec)) {
        fs::path kill = node.path() / "cgroup.kill";
        if (node.is_directory() && fs::exists(kill) && slurp(kill) == "1") empty(node.path());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void empty(const fs::path& node) {
    {
      std::lock_guard lock(mutex_);
      killed_.insert(node.filename());
    }
    std::error_code ec;
    for (const auto& file : fs::directory_iterator(node, ec)) {
      if (file.is_regular_file() && file.path().filename() != "cgroup.events")
        fs::remove(file.path(), ec);
    }
    fs::remove(node / "cgroup.events", ec);
  }

  fs::path cela_;
  std::mutex mutex_;
  std::set<std::string> killed_;
  std::jthread thread_;
};

// The wait status of `pid`, or -1 after killing it if it did not exit within 5 s.
int wait_exit(pid_t pid) {
  int status = 0;
  for (int i = 0; i < 5000; ++i) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

class CgroupV2Fake : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/cela-cgroup2-XXXXXX";
    ASSERT_NE(::mkdtemp(templ), nullptr);
    root_ = templ;
    put(root_ / "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
    put(root_ / "cgroup.subtree_control", "");
    fs::create_directory(cela());
    put(cela() / "cgroup.subtree_control", "");
    kernel_.emplace(cela());
    auto host = open_cgroup_host(CgroupMode::unified, root_);
    ASSERT_TRUE(host) << host.error().message();
    host_ = std::move(*host);
  }

  void TearDown() override {
    kernel_.reset();
    fs::remove_all(root_);
  }

  fs::path cela() const { return root_ / "cela"; }
  fs::path node(const std::string& name) const { return cela() / name; }

  // The files the kernel creates in a new node (those the backend touches). Writable
  // ones start empty because a plain file, unlike a kernel one, is not truncated by a
  // write. The node holds a task until FakeKernel sees cgroup.kill.
  void make_node(const fs::path& dir) {
    fs::create_directories(dir);
    for (const char* file : {"cgroup.procs", "cgroup.kill", "cgroup.freeze", "memory.max",
                             "memory.swap.max", "cpu.max", "pids.max"})
      put(dir / file, "");
    put(dir / "cgroup.events", "populated 1\nfrozen 0\n");
    put(dir / "cpu.stat", "usage_usec 0\nthrottled_usec 0\n");
    put(dir / "memory.events", "oom_kill 0\n");
    put(dir / "pids.events", "max 0\n");
    for (const char* file : {"memory.current", "memory.peak", "pids.current", "pids.peak"})
      put(dir / file, "0\n");
  }

  // create() plus the files the kernel would have made.
  std::unique_ptr<Cgroup> create(const std::string& name) {
    auto cg = host_->create(name);
    EXPECT_TRUE(cg) << cg.error().message();
    if (!cg) return nullptr;
    make_node(node(name));
    return std::move(*cg);
  }

  // As if the node had been removed behind the backend's back.
  void vanish(const std::string& name) {
    for (const auto& file : fs::directory_iterator(node(name))) fs::remove(file.path());
    fs::remove(node(name));
  }

  fs::path root_;
  std::optional<FakeKernel> kernel_;
  std::unique_ptr<CgroupHost> host_;
};

std::map<std::string, std::string> mounts_by_point() {
  std::map<std::string, std::string> types;
  std::ifstream in("/proc/self/mounts");
  std::string source, point, type, rest;
  while (in >> source >> point >> type && std::getline(in, rest)) types[point] = type;
  return types;
}

TEST(CgroupMode, DetectsFromFilesystemTypes) {
  EXPECT_EQ(to_string(CgroupMode::legacy), "legacy");
  EXPECT_EQ(to_string(CgroupMode::hybrid), "hybrid");
  EXPECT_EQ(to_string(CgroupMode::unified), "unified");

  char templ[] = "/tmp/cela-cgroup-mode-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  fs::path dir = templ;
  EXPECT_EQ(detect_cgroup_mode(dir), CgroupMode::legacy);
  fs::create_directory(dir / "unified");  // a plain directory, not a cgroup2 mount
  EXPECT_EQ(detect_cgroup_mode(dir), CgroupMode::legacy);
  fs::remove_all(dir);
  EXPECT_FALSE(detect_cgroup_mode(dir));

  auto types = mounts_by_point();
  CgroupMode expected = types["/sys/fs/cgroup"] == "cgroup2"           ? CgroupMode::unified
                        : types["/sys/fs/cgroup/unified"] == "cgroup2" ? CgroupMode::hybrid
                                                                       : CgroupMode::legacy;
  EXPECT_EQ(detect_cgroup_mode(), expected);
  if (types["/sys/fs/cgroup/unified"] == "cgroup2") {
    EXPECT_EQ(detect_cgroup_mode("/sys/fs/cgroup/unified"), CgroupMode::unified);
  }
}

TEST_F(CgroupV2Fake, OpenNeedsACgroup2Root) {
  auto host = open_cgroup_host(CgroupMode::unified, root_ / "nothing");
  ASSERT_FALSE(host);
  EXPECT_EQ(host.error().code, ErrorCode::not_found);
}

TEST_F(CgroupV2Fake, CreateDelegatesControllersAndMakesTheNode) {
  auto cg = host_->create("s1");
  ASSERT_TRUE(cg) << cg.error().message();
  EXPECT_EQ(host_->mode(), CgroupMode::unified);
  EXPECT_EQ((*cg)->name(), "s1");
  EXPECT_EQ(slurp(root_ / "cgroup.subtree_control"), "+memory +cpu +pids");
  EXPECT_EQ(slurp(cela() / "cgroup.subtree_control"), "+memory +cpu +pids");
  ASSERT_TRUE(fs::is_directory(node("s1")));

  struct stat by_fd = {}, by_path = {};
  ASSERT_EQ(::fstat((*cg)->cgroup2_fd(), &by_fd), 0);
  ASSERT_EQ(::stat(node("s1").c_str(), &by_path), 0);
  EXPECT_EQ(by_fd.st_ino, by_path.st_ino);
  EXPECT_TRUE(::fcntl((*cg)->cgroup2_fd(), F_GETFD) & FD_CLOEXEC);
  make_node(node("s1"));
}

TEST_F(CgroupV2Fake, BlockIoLimitsDelegateIoAndWriteIoMaxAndWeight) {
  IoLimits io{.weight = 200, .devices = {{.major = 254, .minor = 0, .read_bps = 1 << 20, .write_iops = 100},
                                         {.major = 259, .minor = 16, .write_bps = 5 << 20}}};
  auto host = open_cgroup_host(CgroupMode::unified, root_, {.io = io});
  ASSERT_TRUE(host) << host.error().message();
  EXPECT_TRUE((*host)->io_support().throttle);
  auto cg = (*host)->create("s1");
  ASSERT_TRUE(cg) << cg.error().message();
  EXPECT_EQ(slurp(root_ / "cgroup.subtree_control"), "+memory +cpu +pids +io");
  EXPECT_EQ(slurp(cela() / "cgroup.subtree_control"), "+memory +cpu +pids +io");
  make_node(node("s1"));
  put(node("s1") / "io.max", "");
  put(node("s1") / "io.weight", "");
  ASSERT_TRUE((*cg)->apply({.memory_bytes = 0, .cpus = 0, .pids = 8}));
  // One write per device (the kernel keeps a line per device); a plain file shows the
  // last, longer one over the first.
  EXPECT_EQ(slurp(node("s1") / "io.max"), "259:16 rbps=max wbps=5242880 riops=max wiops=max");
  EXPECT_EQ(slurp(node("s1") / "io.weight"), "default 200");
}

TEST_F(CgroupV2Fake, BlockIoNeedsTheIoControllerAtTheRoot) {
  put(root_ / "cgroup.controllers", "cpu memory pids\n");
  auto host = open_cgroup_host(CgroupMode::unified, root_, {.io = {.weight = 50, .devices = {}}});
  ASSERT_TRUE(host) << host.error().message();
  EXPECT_FALSE((*host)->io_support().weight);
  auto cg = (*host)->create("s1");
  ASSERT_TRUE(cg);
  EXPECT_EQ(slurp(root_ / "cgroup.subtree_control"), "+memory +cpu +pids");
  make_node(node("s1"));
  ASSERT_TRUE((*cg)->apply({.memory_bytes = 0, .cpus = 0, .pids = 8}));  // no io files: skipped
  EXPECT_FALSE(fs::exists(node("s1") / "io.weight"));
}

TEST(WholeDisk, FindsTheDiskOfAPathOrNone) {
  // This host: / is on a block device of /sys/dev/block; /dev/shm (tmpfs) is not.
  auto root = whole_disk_of("/");
  ASSERT_TRUE(root) << root.error().message();
  if (*root) {
    std::string node = "/sys/dev/block/" + std::to_string((*root)->first) + ":" + std::to_string((*root)->second);
    EXPECT_TRUE(fs::exists(node)) << node;
    EXPECT_FALSE(fs::exists(node + "/partition")) << node;
  }
  auto shm = whole_disk_of("/dev/shm");
  ASSERT_TRUE(shm);
  EXPECT_FALSE(*shm);
  EXPECT_FALSE(whole_disk_of("/no/such/path"));

  // A fake sysfs where the directory's device is a partition of disk 8:0.
  char templ[] = "/tmp/cela-sys-XXXXXX";
  ASSERT_NE(::mkdtemp(templ), nullptr);
  fs::path sys = templ;
  struct stat st = {};
  ASSERT_EQ(::stat(templ, &st), 0);
  fs::path part = sys / "dev/block" / (std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)));
  fs::create_directories(part);
  put(part / "partition", "1\n");
  put(part / "dev", "99:1\n");
  put(part.parent_path() / "dev", "8:0\n");  // what <partition>/../dev reaches here
  auto disk = whole_disk_of(templ, sys);
  ASSERT_TRUE(disk) << disk.error().message();
  ASSERT_TRUE(*disk);
  EXPECT_EQ(**disk, (std::pair<uint32_t, uint32_t>{8, 0}));
  fs::remove(part / "partition");
  disk = whole_disk_of(templ, sys);
  ASSERT_TRUE(disk && *disk);
  EXPECT_EQ(**disk, (std::pair<uint32_t, uint32_t>{99, 1}));
  fs::remove_all(sys);
}

TEST_F(CgroupV2Fake, CreateWritesOnlyControllersNotYetEnabled) {
  put(root_ / "cgroup.subtree_control", "memory\n");
  put(cela() / "cgroup.subtree_control", "cpu memory pids\n");
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  EXPECT_EQ(slurp(root_ / "cgroup.subtree_control"), "+cpu +pids");
  EXPECT_EQ(slurp(cela() / "cgroup.subtree_control"), "cpu memory pids");
}

TEST_F(CgroupV2Fake, CreateRefusesAnExistingName) {
  auto first = create("s1");
  ASSERT_TRUE(first);
  auto second = host_->create("s1");
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().err, EEXIST);
  EXPECT_NE(second.error().message().find(node("s1").string()), std::string::npos);
}

TEST_F(CgroupV2Fake, CreateRejectsNamesThatAreNotOneComponent) {
  for (const char* name : {"", ".", "..", "a/b", "../escape"}) {
    auto cg = host_->create(name);
    ASSERT_FALSE(cg) << name;
    EXPECT_EQ(cg.error().code, ErrorCode::invalid_argument) << name;
  }
}

TEST_F(CgroupV2Fake, CreateRemovesTheParentItMadeWhenDelegationFails) {
  kernel_.reset();
  fs::remove_all(cela());  // create() makes cela/, which here gets no subtree_control
  auto cg = host_->create("s1");
  ASSERT_FALSE(cg);
  EXPECT_NE(cg.error().message().find((cela() / "cgroup.subtree_control").string()),
            std::string::npos);
  EXPECT_FALSE(fs::exists(cela()));
}

TEST_F(CgroupV2Fake, ApplyWritesLimitsWithSwapOff) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  ASSERT_TRUE(cg->apply({.memory_bytes = 256ull << 20, .cpus = 1.5, .pids = 64}));
  EXPECT_EQ(slurp(node("s1") / "memory.max"), "268435456");
  EXPECT_EQ(slurp(node("s1") / "memory.swap.max"), "0");
  EXPECT_EQ(slurp(node("s1") / "cpu.max"), "150000 100000");
  EXPECT_EQ(slurp(node("s1") / "pids.max"), "64");
}

TEST_F(CgroupV2Fake, ApplyZeroMeansUnlimited) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  ASSERT_TRUE(cg->apply({}));
  EXPECT_EQ(slurp(node("s1") / "memory.max"), "max");
  EXPECT_EQ(slurp(node("s1") / "memory.swap.max"), "max");
  EXPECT_EQ(slurp(node("s1") / "cpu.max"), "max 100000");
  EXPECT_EQ(slurp(node("s1") / "pids.max"), "max");
}

TEST_F(CgroupV2Fake, ApplySkipsMissingSwapFileAndKeepsAMinimumQuota) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  fs::remove(node("s1") / "memory.swap.max");  // kernel without swap accounting
  ASSERT_TRUE(cg->apply({.memory_bytes = 1 << 20, .cpus = 0.001, .pids = 0}));
  EXPECT_EQ(slurp(node("s1") / "cpu.max"), "1000 100000");
  EXPECT_FALSE(fs::exists(node("s1") / "memory.swap.max"));
}

TEST_F(CgroupV2Fake, ApplyRejectsANegativeCpuLimit) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  auto r = cg->apply({.memory_bytes = 0, .cpus = -1, .pids = 0});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(slurp(node("s1") / "memory.max"), "");
}

TEST_F(CgroupV2Fake, StatsParsesTheKernelFiles) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  fs::path dir = node("s1");
  put(dir / "cpu.stat",
      "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 10\n"
      "nr_throttled 2\nthrottled_usec 250\nnr_bursts 0\nburst_usec 0\n");
  put(dir / "memory.current", "12288\n");
  put(dir / "memory.peak", "65536\n");
  put(dir / "memory.events", "low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\noom_group_kill 0\n");
  put(dir / "pids.current", "3\n");
  put(dir / "pids.peak", "5\n");
  put(dir / "pids.events", "max 4\nmax.imposed 9\n");
  auto stats = cg->stats();
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_EQ(stats->cpu_usage_ns, 1'500'000u);
  EXPECT_EQ(stats->cpu_throttled_ns, 250'000u);
  EXPECT_EQ(stats->memory_current_bytes, 12288u);
  EXPECT_EQ(stats->memory_peak_bytes, 65536u);
  EXPECT_EQ(stats->oom_kills, 1u);
  EXPECT_EQ(stats->pids_current, 3u);
  EXPECT_EQ(stats->pids_peak, 5u);
  EXPECT_EQ(stats->pids_max_hits, 4u);
}

TEST_F(CgroupV2Fake, StatsWithoutPeakFilesReportZeroPeaks) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  put(node("s1") / "memory.current", "4096\n");
  fs::remove(node("s1") / "memory.peak");
  fs::remove(node("s1") / "pids.peak");
  auto stats = cg->stats();
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_EQ(stats->memory_current_bytes, 4096u);
  EXPECT_EQ(stats->memory_peak_bytes, 0u);
  EXPECT_EQ(stats->pids_peak, 0u);
}

TEST_F(CgroupV2Fake, StatsErrorNamesTheFile) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  fs::remove(node("s1") / "memory.events");
  auto stats = cg->stats();
  ASSERT_FALSE(stats);
  EXPECT_NE(stats.error().message().find((node("s1") / "memory.events").string()),
            std::string::npos);
}

TEST_F(CgroupV2Fake, PopulatedReadsCgroupEvents) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  EXPECT_EQ(cg->populated(), true);
  put(node("s1") / "cgroup.events", "populated 0\nfrozen 0\n");
  EXPECT_EQ(cg->populated(), false);
  put(node("s1") / "cgroup.events", "populated 1\nfrozen 0\n");
}

TEST_F(CgroupV2Fake, AttachWritesThePid) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  ASSERT_TRUE(cg->attach(4242));
  EXPECT_EQ(slurp(node("s1") / "cgroup.procs"), "4242");
}

TEST_F(CgroupV2Fake, KillAllWritesCgroupKill) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  ASSERT_TRUE(cg->kill_all());
  for (int i = 0; i < 2000 && fs::exists(node("s1") / "cgroup.events"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(kernel_->killed().contains("s1"));
  fs::remove(node("s1"));  // what is left of the emptied node
}

TEST_F(CgroupV2Fake, KillAllWithoutCgroupKillFreezesSignalsAndThaws) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  fs::path dir = node("s1");
  fs::remove(dir / "cgroup.kill");  // a kernel before 5.14
  put(dir / "cgroup.events", "populated 1\nfrozen 1\n");
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  put(dir / "cgroup.procs", std::to_string(child) + "\n");

  auto r = cg->kill_all();
  int status = wait_exit(child);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  EXPECT_EQ(slurp(dir / "cgroup.freeze"), "0");
  vanish("s1");
}

TEST_F(CgroupV2Fake, DestroyKillsWaitsAndRemovesTheNode) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  auto r = cg->destroy();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(kernel_->killed().contains("s1"));
  EXPECT_FALSE(fs::exists(node("s1")));
  EXPECT_EQ(cg->cgroup2_fd(), -1);
  EXPECT_TRUE(cg->destroy());  // idempotent
}

TEST_F(CgroupV2Fake, DestroyRemovesChildCgroupsFirst) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  fs::create_directory(node("s1") / "e-1");  // a per-exec cgroup a crashed owner left
  auto r = cg->destroy();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_FALSE(fs::exists(node("s1")));
}

TEST_F(CgroupV2Fake, DestroyFailureNamesTheDirectory) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  // A child that cannot be removed (here: not empty) keeps the node busy.
  fs::create_directory(node("s1") / "child");
  std::ofstream(node("s1") / "child" / "busy") << "x";
  auto r = cg->destroy();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message().find("rmdir " + (node("s1") / "child").string()), std::string::npos)
      << r.error().message();
  fs::remove_all(node("s1") / "child");
  vanish("s1");
  EXPECT_TRUE(cg->destroy());  // the node is gone: nothing left to do
}

TEST_F(CgroupV2Fake, DestructorDestroys) {
  ASSERT_TRUE(create("s1"));
  EXPECT_TRUE(kernel_->killed().contains("s1"));
  EXPECT_FALSE(fs::exists(node("s1")));
}

TEST_F(CgroupV2Fake, RemoveStaleKillsAndRemovesALeftover) {
  make_node(node("old"));
  auto r = host_->remove_stale("old");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(kernel_->killed().contains("old"));
  EXPECT_FALSE(fs::exists(node("old")));
  EXPECT_TRUE(host_->remove_stale("never-existed"));
}

TEST_F(CgroupV2Fake, ListNamesTheNodesUnderCela) {
  auto a = create("a");
  auto b = create("b");
  ASSERT_TRUE(a && b);
  put(cela() / "cgroup.procs", "");  // files beside the nodes are not cgroups
  auto names = host_->list();
  ASSERT_TRUE(names) << names.error().message();
  EXPECT_EQ(*names, (std::vector<std::string>{"a", "b"}));
}

TEST_F(CgroupV2Fake, FreezeWritesCgroupFreezeAndWaitsForTheKernel) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  // The kernel reports the new state in cgroup.events; here a thread plays the kernel.
  std::jthread kernel([&] {
    for (int i = 0; i < 200 && slurp(node("s1") / "cgroup.freeze") != "1"; ++i) ::usleep(2000);
    put(node("s1") / "cgroup.events", "populated 1\nfrozen 1\n");
  });
  auto frozen = cg->freeze(true);
  ASSERT_TRUE(frozen) << frozen.error().message();
  EXPECT_EQ(slurp(node("s1") / "cgroup.freeze"), "1");
  kernel.join();
  // A freeze the kernel never confirms is an error, not a silent success.
  put(node("s1") / "cgroup.events", "populated 1\nfrozen 1\n");
  auto stuck = cg->freeze(false);
  ASSERT_FALSE(stuck);
  EXPECT_NE(stuck.error().message().find("did not settle"), std::string::npos) << stuck.error().message();
  put(node("s1") / "cgroup.events", "populated 1\nfrozen 0\n");
}

TEST_F(CgroupV2Fake, RequestFreezeWritesAtOnceAndSettledReadsCgroupEvents) {
  auto cg = create("s1");
  ASSERT_TRUE(cg);
  put(node("s1") / "cgroup.events", "populated 1\nfrozen 0\n");
  ASSERT_TRUE(cg->request_freeze(true));
  EXPECT_EQ(slurp(node("s1") / "cgroup.freeze"), "1");
  // Until the kernel reports it, the freeze has not settled.
  EXPECT_EQ(cg->freeze_settled(true), false);
  put(node("s1") / "cgroup.events", "populated 1\nfrozen 1\n");
  EXPECT_EQ(cg->freeze_settled(true), true);
  EXPECT_EQ(cg->freeze_settled(false), false);
  ASSERT_TRUE(cg->request_freeze(false));
  EXPECT_EQ(slurp(node("s1") / "cgroup.freeze"), "0");
  EXPECT_EQ(cg->freeze_settled(false), false);
  put(node("s1") / "cgroup.events", "populated 1\nfrozen 0\n");
  EXPECT_EQ(cg->freeze_settled(false), true);
}

}  // namespace
}  // namespace cela::jail
