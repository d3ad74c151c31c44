// The cgroup v1 backend against this machine's real hierarchies (legacy or hybrid host;
// skipped when not root or on a unified host). Every cgroup is named unittest-<pid>-<n>
// and removed in TearDown even when a test fails; forked children die with the test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "common/fd.h"
#include "jail/cgroup.h"

namespace cela::jail {
namespace {

namespace fs = std::filesystem;

const fs::path kRoot = "/sys/fs/cgroup";
constexpr uint64_t kMiB = 1 << 20;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Burns CPU for `ms` of wall-clock time.
// Spins for `ms` of wall time (what a CPU quota cuts down).
void spin(int ms) {
  timespec start{}, now{};
  ::clock_gettime(CLOCK_MONOTONIC, &start);
  do {
    ::clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1'000'000 < ms);
}

// Burns until this process has used `ms` of CPU time (on a loaded host a wall-clock
// spin may get far less CPU than it waited).
void burn_cpu(int ms) {
  timespec now{};
  do {
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  } while (now.tv_sec * 1000 + now.tv_nsec / 1'000'000 < ms);
}

// Maps and touches `bytes` of anonymous memory (no malloc: this runs after fork).
void touch(size_t bytes) {
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) ::_exit(90);
  for (size_t i = 0; i < bytes; i += 4096) static_cast<volatile char*>(mem)[i] = 1;
}

class CgroupV1Host : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    auto mode = detect_cgroup_mode();
    ASSERT_TRUE(mode) << mode.error().message();
    if (*mode == CgroupMode::unified) GTEST_SKIP() << "unified host: no v1 hierarchies";
    mode_ = *mode;
    auto host = open_cgroup_host(mode_);
    ASSERT_TRUE(host) << host.error().message();
    host_ = std::move(*host);
  }

  // Cgroups first: a child left in a frozen cgroup would not die of SIGKILL.
  void TearDown() override {
    cgroups_.clear();
    for (const std::string& name : names_) {
      auto r = host_->remove_stale(name);
      EXPECT_TRUE(r) << r.error().message();
      for (const fs::path& dir : dirs(name)) EXPECT_FALSE(fs::exists(dir)) << dir;
    }
    for (pid_t pid : std::vector<pid_t>(children_)) {
      ::kill(pid, SIGKILL);
      EXPECT_NE(wait_exit(pid), -1) << "child " << pid << " did not die";
    }
  }

  std::string next_name() {
    names_.push_back("unittest-" + std::to_string(::getpid()) + "-" +
                     std::to_string(names_.size()));
    return names_.back();
  }

  // Creates a cgroup the fixture destroys; a failure ends the test (as an exception).
  Cgroup& create(CgroupHost& host) {
    auto cg = host.create(next_name());
    if (!cg) throw std::runtime_error("create: " + cg.error().message());
    cgroups_.push_back(std::move(*cg));
    return *cgroups_.back();
  }

  // Where a cgroup of this name lives in the hierarchies this host mode uses.
  std::vector<fs::path> dirs(const std::string& name, bool with_unified = true) const {
    std::vector<fs::path> out;
    for (const char* controller : {"memory", "cpu", "cpuacct", "pids", "freezer"})
      out.push_back(kRoot / controller / "cela" / name);
    if (mode_ == CgroupMode::hybrid && with_unified) out.push_back(kRoot / "unified/cela" / name);
    return out;
  }
  fs::path dir(const char* controller, const std::string& name) const {
    return kRoot / controller / "cela" / name;
  }

  // Forks a child that waits until it is attached to `cg`, then runs `body` and exits
  // with its result. -1 if the attach failed (the child is then killed).
  pid_t start_in(Cgroup& cg, const std::function<int()>& body) {
    int go[2];
    if (::pipe2(go, O_CLOEXEC) != 0) return -1;
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::close(go[1]);
      char byte;
      if (::read(go[0], &byte, 1) != 1) ::_exit(100);
      ::_exit(body());
    }
    ::close(go[0]);
    UniqueFd release(go[1]);
    if (pid < 0) return -1;
    children_.push_back(pid);
    auto attached = cg.attach(pid);
    EXPECT_TRUE(attached) << attached.error().message();
    if (!attached) return -1;
    return ::write(release.get(), "x", 1) == 1 ? pid : -1;
  }

  // The wait status of `pid`, or -1 after killing it if it did not exit within 10 s.
  int wait_exit(pid_t pid) {
    int status = 0;
    for (int i = 0; i < 10000; ++i) {
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        std::erase(children_, pid);
        return status;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return -1;
  }

  // Polls populated() until it is false (true) or a second passed (false).
  bool becomes_empty(const Cgroup& cg) {
    for (int i = 0; i < 1000; ++i) {
      auto populated = cg.populated();
      if (populated && !*populated) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return false;
  }

  CgroupMode mode_ = CgroupMode::legacy;
  std::unique_ptr<CgroupHost> host_;
  std::vector<std::unique_ptr<Cgroup>> cgroups_;
  std::vector<std::string> names_;
  std::vector<pid_t> children_;
};

bool killed_by_sigkill(int status) {
  return status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

// A pipe a child writes one byte to when it is ready; wait() gives up after 5 s.
struct ReadySignal {
  ReadySignal() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) == 0) read_end.reset(fds[0]), write_end.reset(fds[1]);
  }
  void send() { (void)!::write(write_end.get(), "r", 1); }
  bool wait() {
    pollfd pfd{read_end.get(), POLLIN, 0};
    char byte;
    return ::poll(&pfd, 1, 5000) == 1 && ::read(read_end.get(), &byte, 1) == 1;
  }
  UniqueFd read_end, write_end;
};

TEST_F(CgroupV1Host, CreateMakesTheCgroupInEveryHierarchy) {
  Cgroup& cg = create(*host_);
  EXPECT_EQ(host_->mode(), mode_);
  for (const fs::path& d : dirs(cg.name())) EXPECT_TRUE(fs::is_directory(d)) << d;

  if (mode_ == CgroupMode::hybrid) {
    struct stat by_fd = {}, by_path = {};
    ASSERT_EQ(::fstat(cg.cgroup2_fd(), &by_fd), 0);
    ASSERT_EQ(::stat((kRoot / "unified/cela" / cg.name()).c_str(), &by_path), 0);
    EXPECT_EQ(by_fd.st_ino, by_path.st_ino);
  } else {
    EXPECT_EQ(cg.cgroup2_fd(), -1);
  }

  auto names = host_->list();
  ASSERT_TRUE(names) << names.error().message();
  EXPECT_NE(std::ranges::find(*names, cg.name()), names->end());
  auto again = host_->create(cg.name());
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().err, EEXIST);
}

TEST_F(CgroupV1Host, ApplyWritesV1LimitsInEitherDirection) {
  Cgroup& cg = create(*host_);
  fs::path memory = dir("memory", cg.name()), cpu = dir("cpu", cg.name());
  bool memsw = fs::exists(memory / "memory.memsw.limit_in_bytes");

  ASSERT_TRUE(cg.apply({.memory_bytes = 64 * kMiB, .cpus = 0.5, .pids = 16}));
  EXPECT_EQ(slurp(memory / "memory.limit_in_bytes"), std::to_string(64 * kMiB));
  if (memsw) {
    EXPECT_EQ(slurp(memory / "memory.memsw.limit_in_bytes"), std::to_string(64 * kMiB));
  }
  EXPECT_EQ(slurp(memory / "memory.swappiness"), "0");
  EXPECT_EQ(slurp(cpu / "cpu.cfs_period_us"), "100000");
  EXPECT_EQ(slurp(cpu / "cpu.cfs_quota_us"), "50000");
  EXPECT_EQ(slurp(dir("pids", cg.name()) / "pids.max"), "16");

  for (uint64_t mib : {32, 128}) {  // lowering then raising: memsw must stay >= memory
    auto r = cg.apply({.memory_bytes = mib * kMiB, .cpus = 2, .pids = 16});
    ASSERT_TRUE(r) << r.error().message();
    EXPECT_EQ(slurp(memory / "memory.limit_in_bytes"), std::to_string(mib * kMiB));
    if (memsw) {
      EXPECT_EQ(slurp(memory / "memory.memsw.limit_in_bytes"), std::to_string(mib * kMiB));
    }
  }
  EXPECT_EQ(slurp(cpu / "cpu.cfs_quota_us"), "200000");

  ASSERT_TRUE(cg.apply({}));
  EXPECT_GT(std::stoull(slurp(memory / "memory.limit_in_bytes")), 1ull << 60);
  EXPECT_EQ(slurp(cpu / "cpu.cfs_quota_us"), "-1");
  EXPECT_EQ(slurp(dir("pids", cg.name()) / "pids.max"), "max");
}

// v1 charges socket buffers only to cgroups whose kmem.tcp limit was written: the
// session's gets its memory limit, and a per-exec child turns the accounting on so
// sockets its tasks create count against the session's counter above it.
TEST_F(CgroupV1Host, SocketBuffersOfAnExecChildAreChargedToTheSession) {
  Cgroup& cg = create(*host_);
  fs::path tcp = dir("memory", cg.name()) / "memory.kmem.tcp.limit_in_bytes";
  if (!fs::exists(tcp)) GTEST_SKIP() << "kernel without v1 tcp accounting";
  ASSERT_TRUE(cg.apply({.memory_bytes = 64 * kMiB, .cpus = 0, .pids = 64}));
  EXPECT_EQ(slurp(tcp), std::to_string(64 * kMiB));
  auto child = cg.create_child("e-1");
  ASSERT_TRUE(child) << child.error().message();
  ReadySignal ready;
  pid_t pid = start_in(**child, [&]() -> int {
    int srv = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(srv, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(srv, 1) != 0 ||
        ::getsockname(srv, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      return 91;
    int c = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    (void)::connect(c, reinterpret_cast<sockaddr*>(&addr), len);
    int peer = ::accept(srv, nullptr, nullptr);  // never read
    if (peer < 0) return 92;
    pollfd out{c, POLLOUT, 0};
    if (::poll(&out, 1, 5000) != 1) return 93;
    static char chunk[65536];
    for (int i = 0; i < 64; ++i) (void)::send(c, chunk, sizeof chunk, MSG_DONTWAIT);
    ready.send();
    ::pause();
    return 0;
  });
  ASSERT_GT(pid, 0);
  ASSERT_TRUE(ready.wait());
  EXPECT_GT(std::stoull(slurp(dir("memory", cg.name()) / "memory.kmem.tcp.usage_in_bytes")), kMiB);
  ::kill(pid, SIGKILL);
  EXPECT_TRUE(killed_by_sigkill(wait_exit(pid)));
  ASSERT_TRUE((*child)->destroy());
}

// Block I/O limits exist only when the host is opened with some: then every sandbox
// gets a blkio cgroup holding the throttles (the weight where a proportional policy
// exists), removed with it.
TEST_F(CgroupV1Host, BlockIoLimitsGoToBlkioOnlyWhenConfigured) {
  if (!fs::exists(kRoot / "blkio")) GTEST_SKIP() << "no blkio hierarchy";
  Cgroup& plain = create(*host_);
  EXPECT_FALSE(fs::exists(dir("blkio", plain.name())));
  EXPECT_FALSE(host_->io_support().throttle);  // not asked for

  auto disk = whole_disk_of("/");
  ASSERT_TRUE(disk) << disk.error().message();
  if (!*disk) GTEST_SKIP() << "/ is not on a block device";
  IoLimits io{.weight = 300, .devices = {{.major = (*disk)->first, .minor = (*disk)->second,
                                          .read_bps = 4 * kMiB, .write_iops = 500}}};
  auto host = open_cgroup_host(mode_, kRoot, {.io = io});
  ASSERT_TRUE(host) << host.error().message();
  IoSupport support = (*host)->io_support();
  Cgroup& cg = create(**host);
  ASSERT_TRUE(cg.apply({.memory_bytes = 0, .cpus = 0, .pids = 16}));
  fs::path blkio = dir("blkio", cg.name());
  ASSERT_TRUE(fs::is_directory(blkio));
  std::string dev = std::to_string((*disk)->first) + ":" + std::to_string((*disk)->second);
  if (support.throttle) {
    EXPECT_EQ(slurp(blkio / "blkio.throttle.read_bps_device"), dev + " " + std::to_string(4 * kMiB));
    EXPECT_EQ(slurp(blkio / "blkio.throttle.write_iops_device"), dev + " 500");
    EXPECT_EQ(slurp(blkio / "blkio.throttle.write_bps_device"), "");  // 0: no limit written
  }
  if (fs::exists(blkio / "blkio.weight")) {
    EXPECT_EQ(slurp(blkio / "blkio.weight"), "300");
  } else if (fs::exists(blkio / "blkio.bfq.weight")) {
    EXPECT_EQ(slurp(blkio / "blkio.bfq.weight"), "300");
    EXPECT_TRUE(support.weight);
  }
  // v1 throttles each cgroup on its own: an exec child stays in the sandbox's blkio
  // cgroup and shares its limits.
  auto child = cg.create_child("e-1");
  ASSERT_TRUE(child) << child.error().message();
  EXPECT_TRUE(fs::is_directory(dir("memory", cg.name()) / "e-1"));
  EXPECT_FALSE(fs::exists(blkio / "e-1"));
  ASSERT_TRUE((*child)->destroy());
  ASSERT_TRUE(cg.destroy());
  EXPECT_FALSE(fs::exists(blkio));
}

// A cela opened without block I/O limits still finds and removes leftovers another
// (configured) cela left in blkio.
TEST_F(CgroupV1Host, RemoveStaleReachesBlkioLeftoversWithoutBlockIoLimits) {
  if (!fs::exists(kRoot / "blkio")) GTEST_SKIP() << "no blkio hierarchy";
  std::string name = next_name();
  fs::create_directories(dir("blkio", name) / "e-3");
  auto names = host_->list();
  ASSERT_TRUE(names);
  EXPECT_NE(std::ranges::find(*names, name), names->end());
  ASSERT_TRUE(host_->remove_stale(name));
  EXPECT_FALSE(fs::exists(dir("blkio", name)));
}

TEST_F(CgroupV1Host, AttachKillAllAndDestroy) {
  Cgroup& cg = create(*host_);
  std::string name = cg.name();
  pid_t child = start_in(cg, [] {
    ::pause();
    return 0;
  });
  ASSERT_GT(child, 0);

  std::string membership = slurp("/proc/" + std::to_string(child) + "/cgroup");
  for (const char* controller : {"memory", "cpu", "cpuacct", "pids", "freezer"})
    EXPECT_NE(membership.find(std::string(controller) + ":/cela/" + name), std::string::npos)
        << controller << " in\n"
        << membership;
  if (mode_ == CgroupMode::hybrid) {
    EXPECT_NE(membership.find("0::/cela/" + name), std::string::npos) << membership;
  }

  EXPECT_EQ(cg.populated(), true);
  ASSERT_TRUE(cg.kill_all());
  EXPECT_TRUE(killed_by_sigkill(wait_exit(child)));
  EXPECT_TRUE(becomes_empty(cg));

  auto r = cg.destroy();
  ASSERT_TRUE(r) << r.error().message();
  for (const fs::path& d : dirs(name)) EXPECT_FALSE(fs::exists(d)) << d;
  EXPECT_EQ(cg.cgroup2_fd(), -1);
  EXPECT_TRUE(cg.destroy());
}

TEST_F(CgroupV1Host, FreezeStopsTheProcessesAndThawResumesThem) {
  Cgroup& cg = create(*host_);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  // The child writes a byte every 10 ms while it runs.
  pid_t child = start_in(cg, [&] {
    ::close(pipefd[0]);
    for (;;) {
      if (::write(pipefd[1], "x", 1) != 1) return 1;
      ::usleep(10'000);
    }
  });
  ASSERT_GT(child, 0);
  ::close(pipefd[1]);
  ::fcntl(pipefd[0], F_SETFL, O_NONBLOCK);
  auto drain = [&] {
    char buf[4096];
    ssize_t total = 0, n;
    while ((n = ::read(pipefd[0], buf, sizeof buf)) > 0) total += n;
    return total;
  };
  ::usleep(50'000);
  EXPECT_GT(drain(), 0);
  auto frozen = cg.freeze(true);
  ASSERT_TRUE(frozen) << frozen.error().message();
  drain();
  ::usleep(100'000);
  EXPECT_EQ(drain(), 0) << "a frozen process kept running";
  auto thawed = cg.freeze(false);
  ASSERT_TRUE(thawed) << thawed.error().message();
  ::usleep(100'000);
  EXPECT_GT(drain(), 0) << "a thawed process did not resume";
  ASSERT_TRUE(cg.kill_all());
  EXPECT_TRUE(killed_by_sigkill(wait_exit(child)));
  ::close(pipefd[0]);
}

// The halves a thread that must not wait uses: the request returns at once and the
// kernel's report is read separately; a busy loop's CPU time stops moving while frozen.
TEST_F(CgroupV1Host, RequestFreezeReturnsAtOnceAndSettledReportsTheKernelState) {
  Cgroup& cg = create(*host_);
  pid_t child = start_in(cg, [] {
    volatile uint64_t spins = 0;
    for (;;) spins = spins + 1;
    return 0;
  });
  ASSERT_GT(child, 0);
  ::usleep(50'000);
  ASSERT_TRUE(cg.request_freeze(true));
  bool settled = false;
  for (int i = 0; i < 1000 && !settled; ++i) {
    auto s = cg.freeze_settled(true);
    ASSERT_TRUE(s) << s.error().message();
    settled = *s;
    if (!settled) ::usleep(1000);
  }
  ASSERT_TRUE(settled) << "the freezer never reported FROZEN";
  auto before = cg.stats();
  ASSERT_TRUE(before);
  ::usleep(200'000);
  auto after = cg.stats();
  ASSERT_TRUE(after);
  // A busy loop uses ~200 ms of CPU in this window when it runs; frozen, nothing.
  EXPECT_LT(after->cpu_usage_ns - before->cpu_usage_ns, 5'000'000u) << "a frozen busy loop used CPU";
  EXPECT_EQ(cg.freeze_settled(false), false);
  ASSERT_TRUE(cg.request_freeze(false));
  settled = false;
  for (int i = 0; i < 1000 && !settled; ++i) {
    auto s = cg.freeze_settled(false);
    ASSERT_TRUE(s);
    settled = *s;
    if (!settled) ::usleep(1000);
  }
  ASSERT_TRUE(settled);
  // Running again (on a loaded host it may take a while to get its CPU back).
  uint64_t ran = 0;
  for (int i = 0; i < 200 && ran < 20'000'000u; ++i) {
    ::usleep(10'000);
    auto resumed = cg.stats();
    ASSERT_TRUE(resumed);
    ran = resumed->cpu_usage_ns - after->cpu_usage_ns;
  }
  EXPECT_GE(ran, 20'000'000u) << "a thawed busy loop did not run";
  ASSERT_TRUE(cg.kill_all());
  EXPECT_TRUE(killed_by_sigkill(wait_exit(child)));
}

// A cgroup left frozen (a paused session, or one whose daemon died meanwhile) is still
// removed: v1 frozen tasks take SIGKILL only once thawed.
TEST_F(CgroupV1Host, DestroyOfAFrozenCgroupKillsItsTasks) {
  Cgroup& cg = create(*host_);
  pid_t child = start_in(cg, [] {
    for (;;) ::pause();
    return 0;
  });
  ASSERT_GT(child, 0);
  auto frozen = cg.freeze(true);
  ASSERT_TRUE(frozen) << frozen.error().message();
  auto r = cg.destroy();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(killed_by_sigkill(wait_exit(child)));
  for (const fs::path& d : dirs(cg.name())) EXPECT_FALSE(fs::exists(d)) << d;
}

TEST_F(CgroupV1Host, DestroyKillsWhatIsStillRunning) {
  Cgroup& cg = create(*host_);
  ReadySignal ready;
  pid_t child = start_in(cg, [&] {
    for (int i = 0; i < 3; ++i)
      if (::fork() == 0) break;  // a small tree: the child and its descendants pause
    ready.send();
    ::pause();
    return 0;
  });
  ASSERT_GT(child, 0);
  ASSERT_TRUE(ready.wait());
  auto r = cg.destroy();
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(killed_by_sigkill(wait_exit(child)));
  for (const fs::path& d : dirs(cg.name())) EXPECT_FALSE(fs::exists(d)) << d;
}

TEST_F(CgroupV1Host, StatsCountCpuMemoryAndPids) {
  Cgroup& cg = create(*host_);
  ASSERT_TRUE(cg.apply({.memory_bytes = 256 * kMiB, .cpus = 0, .pids = 64}));
  ReadySignal ready;
  pid_t child = start_in(cg, [&] {
    burn_cpu(100);
    touch(16 * kMiB);
    for (int i = 0; i < 3; ++i)
      if (::fork() == 0) {
        ::pause();
        ::_exit(0);
      }
    ready.send();
    ::pause();
    return 0;
  });
  ASSERT_GT(child, 0);
  ASSERT_TRUE(ready.wait());

  auto stats = cg.stats();
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_GE(stats->cpu_usage_ns, 50'000'000u);
  EXPECT_GT(stats->memory_current_bytes, 0u);
  EXPECT_GE(stats->memory_peak_bytes, 16 * kMiB);
  EXPECT_EQ(stats->pids_current, 4u);
  if (fs::exists(dir("pids", cg.name()) / "pids.peak")) {
    EXPECT_GE(stats->pids_peak, 4u);
  }
  EXPECT_EQ(stats->oom_kills, 0u);
  EXPECT_EQ(stats->pids_max_hits, 0u);
}

TEST_F(CgroupV1Host, CpuQuotaThrottles) {
  Cgroup& cg = create(*host_);
  ASSERT_TRUE(cg.apply({.memory_bytes = 0, .cpus = 0.1, .pids = 0}));
  pid_t child = start_in(cg, [] {
    spin(300);
    return 0;
  });
  ASSERT_GT(child, 0);
  int status = wait_exit(child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  auto stats = cg.stats();
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_GT(stats->cpu_throttled_ns, 0u);
  EXPECT_LT(stats->cpu_usage_ns, 150'000'000u);  // ~10% of the 300 ms it tried to burn
}

TEST_F(CgroupV1Host, OomKillIsCounted) {
  Cgroup& cg = create(*host_);
  ASSERT_TRUE(cg.apply({.memory_bytes = 32 * kMiB, .cpus = 0, .pids = 0}));
  pid_t child = start_in(cg, [] {
    touch(200 * kMiB);
    return 0;
  });
  ASSERT_GT(child, 0);
  EXPECT_TRUE(killed_by_sigkill(wait_exit(child)));
  auto stats = cg.stats();
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_GE(stats->oom_kills, 1u);
  EXPECT_LE(stats->memory_peak_bytes, 32 * kMiB);
}

TEST_F(CgroupV1Host, PidsLimitRefusesForks) {
  Cgroup& cg = create(*host_);
  ASSERT_TRUE(cg.apply({.memory_bytes = 0, .cpus = 0, .pids = 5}));
  pid_t child = start_in(cg, [] {
    int refused = 0;
    for (int i = 0; i < 20; ++i) {
      pid_t pid = ::fork();
      if (pid == 0) {
        ::pause();
        ::_exit(0);
      }
      if (pid < 0 && errno == EAGAIN) ++refused;
    }
    return refused;
  });
  ASSERT_GT(child, 0);
  int status = wait_exit(child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 16);  // the child and 4 forks fill pids.max = 5
  auto stats = cg.stats();
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_EQ(stats->pids_max_hits, 16u);
  if (fs::exists(dir("pids", cg.name()) / "pids.peak")) {
    EXPECT_EQ(stats->pids_peak, 5u);
  }
  EXPECT_EQ(stats->pids_current, 4u);
  auto r = cg.destroy();  // the 4 orphaned grandchildren are still paused in there
  ASSERT_TRUE(r) << r.error().message();
}

TEST_F(CgroupV1Host, LegacyModeKillsThroughTheFreezer) {
  auto legacy = open_cgroup_host(CgroupMode::legacy);
  ASSERT_TRUE(legacy) << legacy.error().message();
  Cgroup& cg = create(**legacy);
  EXPECT_EQ(cg.cgroup2_fd(), -1);
  EXPECT_FALSE(fs::exists(kRoot / "unified/cela" / cg.name()));
  ASSERT_TRUE(cg.apply({.memory_bytes = 0, .cpus = 0, .pids = 64}));
  ReadySignal ready;
  pid_t child = start_in(cg, [&]() -> int {
    for (int i = 0; i < 3; ++i)
      if (::fork() == 0) break;
    ready.send();
    for (;;) spin(10);  // busy tasks: signalled while frozen, they die on thaw
  });
  ASSERT_GT(child, 0);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ready.wait());
  EXPECT_EQ(cg.populated(), true);

  ASSERT_TRUE(cg.kill_all());
  EXPECT_TRUE(killed_by_sigkill(wait_exit(child)));
  EXPECT_TRUE(becomes_empty(cg));
  EXPECT_EQ(slurp(dir("freezer", cg.name()) / "freezer.state"), "THAWED");
  auto r = cg.destroy();
  ASSERT_TRUE(r) << r.error().message();
  for (const fs::path& d : dirs(cg.name(), false)) EXPECT_FALSE(fs::exists(d)) << d;
}

TEST_F(CgroupV1Host, RemoveStaleKillsAndRemovesALeftover) {
  std::string name = next_name();
  EXPECT_TRUE(host_->remove_stale(name));  // nothing there yet

  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::pause();
    ::_exit(0);
  }
  children_.push_back(child);
  // A runner that died: its directories (and a task) are left, with no Cgroup object.
  for (const fs::path& d : dirs(name)) {
    fs::create_directories(d);
    std::ofstream(d / "cgroup.procs") << child;
  }
  auto names = host_->list();
  ASSERT_TRUE(names);
  EXPECT_NE(std::ranges::find(*names, name), names->end());

  auto r = host_->remove_stale(name);
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_TRUE(killed_by_sigkill(wait_exit(child)));
  for (const fs::path& d : dirs(name)) EXPECT_FALSE(fs::exists(d)) << d;
}

TEST_F(CgroupV1Host, RemoveStaleFinishesAPartialLeftover) {
  std::string name = next_name();
  fs::create_directories(dir("memory", name));  // a destroy that died half way
  ASSERT_TRUE(host_->remove_stale(name));
  EXPECT_FALSE(fs::exists(dir("memory", name)));
}

}  // namespace
}  // namespace cela::jail
