#include "jail/userns.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include "common/fs.h"

namespace cela::jail {

Result<std::optional<UidSlot>> UidSlot::try_acquire(uint32_t index, const std::string& lock_dir) {
  if (index >= kMaxSlots) return fail(ErrorCode::invalid_argument, "no slot " + std::to_string(index));
  if (auto r = make_dirs(lock_dir, 0700); !r) return std::unexpected(r.error());
  return claim(index, lock_dir);
}

Result<std::optional<UidSlot>> UidSlot::claim(uint32_t index, const std::string& lock_dir) {
  std::string path = lock_dir + "/" + std::to_string(index) + ".lock";
  UniqueFd fd(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) return sys_fail("open " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return UidSlot(index, std::move(fd));
  if (errno != EWOULDBLOCK) return sys_fail("flock " + path);
  return std::nullopt;
}

Result<UidSlot> UidSlot::acquire(const std::string& lock_dir, uint32_t max_slots) {
  max_slots = std::min(max_slots, kMaxSlots);
  if (max_slots == 0) return fail(ErrorCode::limit, "no sandbox uid slots are configured");
  // From a random slot on, wrapping: the probes a claim takes follow the share of
  // slots in use, not their number (scanning from slot 0 cost every claim one failed
  // flock per live sandbox on the host).
  // Neither an id nor a secret: getrandom(2) itself, not the CSPRNG of common/random
  // (whose first use costs a one-shot run more than the whole claim).
  uint32_t first = 0;
  if (::getrandom(&first, sizeof first, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof first))
    first = static_cast<uint32_t>(::getpid()) * 2654435761u;
  first %= max_slots;
  if (auto r = make_dirs(lock_dir, 0700); !r) return std::unexpected(r.error());  // once, not per probe
  for (uint32_t n = 0; n < max_slots; ++n) {
    auto slot = claim((first + n) % max_slots, lock_dir);
    if (!slot) return std::unexpected(slot.error());
    if (*slot) return std::move(**slot);
  }
  return fail(ErrorCode::limit, "all " + std::to_string(max_slots) + " sandbox uid slots are in use");
}

std::vector<UserNsLimit> KernelBudgets::default_user_ns_limits() {
  // Nothing inside may create namespaces (seccomp refuses unshare, setns and clone
  // with namespace flags): zero is a second fence. init itself enters one cgroup
  // namespace after the limits are written.
  return {{"max_user_namespaces", 0},   {"max_pid_namespaces", 0},    {"max_net_namespaces", 0},
          {"max_mnt_namespaces", 0},    {"max_ipc_namespaces", 0},    {"max_uts_namespaces", 0},
          {"max_time_namespaces", 0},   {"max_cgroup_namespaces", 1}, {"max_inotify_instances", 128},
          {"max_inotify_watches", 65536}};
}

const std::vector<std::string>& user_ns_limit_names() {
  static const auto& names = *new std::vector<std::string>{
      "max_user_namespaces", "max_pid_namespaces",    "max_net_namespaces",    "max_mnt_namespaces",
      "max_ipc_namespaces",  "max_uts_namespaces",    "max_time_namespaces",   "max_cgroup_namespaces",
      "max_inotify_instances", "max_inotify_watches", "max_fanotify_groups",   "max_fanotify_marks"};
  return names;
}

Result<void> check_user_ns_limits(const std::vector<UserNsLimit>& limits) {
  const auto& known = user_ns_limit_names();
  for (const auto& limit : limits) {
    if (std::find(known.begin(), known.end(), limit.name) == known.end())
      return fail(ErrorCode::invalid_argument, "unknown user namespace limit `" + limit.name + "`");
    if (limit.value > 0x7fffffff)
      return fail(ErrorCode::invalid_argument, "user namespace limit `" + limit.name + "` is above 2147483647");
  }
  return {};
}

Result<void> write_id_maps(pid_t pid, uint32_t host_base) {
  std::string map = "0 " + std::to_string(host_base) + " " + std::to_string(kIdsPerSlot) + "\n";
  std::string proc = "/proc/" + std::to_string(pid);
  if (auto r = write_file(proc + "/uid_map", map); !r) return r;
  return write_file(proc + "/gid_map", map);
}

}  // namespace cela::jail
