#include "common/nofile.h"

#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace cela {
namespace {

// The kernel's per-process ceiling: setrlimit above it fails with EPERM.
std::uint64_t nr_open() {
  std::ifstream in("/proc/sys/fs/nr_open");
  std::uint64_t value = 0;
  if (in >> value && value > 0) return value;
  return 1u << 20;  // the kernel's default
}

std::uint64_t finite(rlim_t value) {
  return value == RLIM_INFINITY ? nr_open() : static_cast<std::uint64_t>(value);
}

}  // namespace

NofileLimit nofile_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return {};
  return {finite(r.rlim_cur), finite(r.rlim_max)};
}

Result<NofileLimit> raise_nofile_limit() {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return sys_fail("getrlimit(RLIMIT_NOFILE)");
  rlim_t target = static_cast<rlim_t>(finite(r.rlim_max));
  if (r.rlim_cur != target) {
    rlimit raised{target, r.rlim_max};
    if (::setrlimit(RLIMIT_NOFILE, &raised) != 0)
      return sys_fail("setrlimit(RLIMIT_NOFILE, " + std::to_string(target) + ")");
  }
  return nofile_limit();
}

std::uint64_t nofile_grant(std::uint64_t wanted) {
  std::uint64_t hard = nofile_limit().hard;
  return hard > 0 ? std::min(wanted, hard) : wanted;
}

}  // namespace cela
