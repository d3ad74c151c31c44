// Capabilities: the kept list, and what drop_bounding_set / set_capabilities leave
// in /proc/self/status. The kernel-facing tests run in forked children as root.
#include "agent/caps.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>

namespace cela::agent {
namespace {

uint64_t mask_of(std::initializer_list<int> caps) {
  uint64_t mask = 0;
  for (int cap : caps) mask |= uint64_t{1} << cap;
  return mask;
}

uint64_t kept_mask() {
  uint64_t mask = 0;
  for (int cap : kept_capabilities()) mask |= uint64_t{1} << cap;
  return mask;
}

// The capability lines of /proc/self/status.
struct CapSets {
  uint64_t inh = 0, prm = 0, eff = 0, bnd = 0, amb = 0;
};

CapSets read_cap_sets() {
  CapSets sets;
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return sets;
  char line[256];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long long v = 0;
    if (std::sscanf(line, "CapInh: %llx", &v) == 1) sets.inh = v;
    if (std::sscanf(line, "CapPrm: %llx", &v) == 1) sets.prm = v;
    if (std::sscanf(line, "CapEff: %llx", &v) == 1) sets.eff = v;
    if (std::sscanf(line, "CapBnd: %llx", &v) == 1) sets.bnd = v;
    if (std::sscanf(line, "CapAmb: %llx", &v) == 1) sets.amb = v;
  }
  std::fclose(f);
  return sets;
}

struct ChildReport {
  int err = -1;    // what the step under test returned
  CapSets before;  // after the preparation, before the step
  CapSets after;
};

// Runs `prepare` then `step` in a forked child; reports the step's result and the
// capability sets around it.
ChildReport in_child(const std::function<void()>& prepare, const std::function<int()>& step) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) ADD_FAILURE() << "pipe: " << std::strerror(errno);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    ChildReport report;
    prepare();
    report.before = read_cap_sets();
    report.err = step();
    report.after = read_cap_sets();
    (void)!::write(fds[1], &report, sizeof report);
    _exit(0);
  }
  ::close(fds[1]);
  ChildReport report;
  if (::read(fds[0], &report, sizeof report) != sizeof report) ADD_FAILURE() << "no report";
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  return report;
}

bool have_full_root() {
  const CapSets sets = read_cap_sets();
  return ::geteuid() == 0 && (sets.eff & mask_of({CAP_SETPCAP, CAP_SYS_ADMIN})) ==
                                 mask_of({CAP_SETPCAP, CAP_SYS_ADMIN});
}

// Puts CAP_NET_BIND_SERVICE into the ambient set (via inheritable), so the test can
// see drop_bounding_set clear it.
void raise_ambient_net_bind() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (::syscall(SYS_capget, &header, data) != 0) _exit(30);
  data[0].inheritable |= 1u << CAP_NET_BIND_SERVICE;
  if (::syscall(SYS_capset, &header, data) != 0) _exit(31);
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_NET_BIND_SERVICE, 0, 0) != 0) _exit(32);
}

TEST(CapsTest, KeptListIsDockerDefaultMinusNetRawAndMknod) {
  const auto& kept = kept_capabilities();
  const std::set<int> got(kept.begin(), kept.end());
  EXPECT_EQ(got.size(), kept.size()) << "duplicate capability";
  const std::set<int> expected = {
      CAP_CHOWN,       CAP_DAC_OVERRIDE, CAP_FOWNER,  CAP_FSETID,           CAP_KILL,
      CAP_SETGID,      CAP_SETUID,       CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT,
      CAP_AUDIT_WRITE, CAP_SETFCAP,
  };
  EXPECT_EQ(got, expected);
}

TEST(CapsTest, KeptListExcludesDangerousCapabilities) {
  const auto& kept = kept_capabilities();
  for (int cap :
       {CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_NET_ADMIN, CAP_NET_RAW, CAP_MKNOD,
        CAP_SYS_BOOT, CAP_SYS_TIME, CAP_BPF, CAP_PERFMON, CAP_SYS_RAWIO, CAP_DAC_READ_SEARCH})
    EXPECT_EQ(std::count(kept.begin(), kept.end(), cap), 0) << "cap " << cap;
}

TEST(CapsTest, DropBoundingSetKeepsOnlyKeptCapsAndClearsAmbient) {
  if (!have_full_root()) GTEST_SKIP() << "needs root with CAP_SETPCAP";
  const ChildReport r = in_child(raise_ambient_net_bind, [] { return drop_bounding_set(); });
  ASSERT_EQ(r.err, 0) << std::strerror(r.err);
  // The preparation worked, so the checks below can fail.
  EXPECT_NE(r.before.bnd & ~kept_mask(), 0u);
  EXPECT_EQ(r.before.amb, mask_of({CAP_NET_BIND_SERVICE}));
  // The host may already lack some kept caps (this one lacks SYS_RESOURCE, say):
  // the bounding set can only shrink.
  EXPECT_EQ(r.after.bnd, kept_mask() & r.before.bnd) << std::hex << r.after.bnd;
  EXPECT_EQ(r.after.amb, 0u);
  EXPECT_EQ(::prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN, 0, 0, 0), 1) << "parent untouched";
}

TEST(CapsTest, SetCapabilitiesEmptyClearsEffectivePermittedInheritable) {
  if (!have_full_root()) GTEST_SKIP() << "needs root";
  const ChildReport r = in_child(raise_ambient_net_bind, [] { return set_capabilities({}); });
  ASSERT_EQ(r.err, 0) << std::strerror(r.err);
  EXPECT_NE(r.before.eff, 0u);
  EXPECT_NE(r.before.inh, 0u);
  EXPECT_EQ(r.after.eff, 0u);
  EXPECT_EQ(r.after.prm, 0u);
  EXPECT_EQ(r.after.inh, 0u);
  EXPECT_EQ(r.after.amb, 0u);  // the kernel drops ambient caps no longer permitted
}

TEST(CapsTest, SetCapabilitiesKeepsExactlyTheGivenSet) {
  if (!have_full_root()) GTEST_SKIP() << "needs root";
  const ChildReport r = in_child([] {}, [] { return set_capabilities({CAP_CHOWN, CAP_KILL}); });
  ASSERT_EQ(r.err, 0) << std::strerror(r.err);
  EXPECT_EQ(r.after.eff, mask_of({CAP_CHOWN, CAP_KILL}));
  EXPECT_EQ(r.after.prm, mask_of({CAP_CHOWN, CAP_KILL}));
  EXPECT_EQ(r.after.inh, 0u);
}

// The allow_sudo path of agent/spawn.cc: bounding set dropped first, then
// CAP_SYS_ADMIN kept only so seccomp can be installed without no_new_privs.
TEST(CapsTest, SetCapabilitiesAcceptsAPermittedCapOutsideTheBoundingSet) {
  if (!have_full_root()) GTEST_SKIP() << "needs root";
  const ChildReport r = in_child(
      [] {
        if (drop_bounding_set() != 0) _exit(33);
      },
      [] { return set_capabilities({CAP_SYS_ADMIN}); });
  ASSERT_EQ(r.err, 0) << std::strerror(r.err);
  EXPECT_EQ(r.before.bnd & mask_of({CAP_SYS_ADMIN}), 0u);
  EXPECT_EQ(r.after.eff, mask_of({CAP_SYS_ADMIN}));
  EXPECT_EQ(r.after.prm, mask_of({CAP_SYS_ADMIN}));
}

TEST(CapsTest, SetCapabilitiesCannotRegainADroppedCap) {
  if (!have_full_root()) GTEST_SKIP() << "needs root";
  const ChildReport r = in_child(
      [] {
        if (set_capabilities({CAP_CHOWN}) != 0) _exit(34);
      },
      [] {
        return set_capabilities({CAP_CHOWN, CAP_KILL});
      });
  EXPECT_EQ(r.err, EPERM);
  EXPECT_EQ(r.after.eff, mask_of({CAP_CHOWN}));
}

TEST(CapsTest, SetCapabilitiesRejectsNumbersOutsideTheMask) {
  EXPECT_EQ(in_child([] {}, [] { return set_capabilities({64}); }).err, EINVAL);
  EXPECT_EQ(in_child([] {}, [] { return set_capabilities({CAP_CHOWN, -1}); }).err, EINVAL);
}

}  // namespace
}  // namespace cela::agent
