#include "jail/userns.h"

#include <algorithm>

#include <fcntl.h>
#include <sys/file.h>

#include "common/fs.h"

namespace cela::jail {

Result<std::optional<UidSlot>> UidSlot::try_acquire(uint32_t index, const std::string& lock_dir) {
  if (index >= kMaxSlots) return fail(ErrorCode::invalid_argument, "no slot " + std::to_string(index));
  if (auto r = make_dirs(lock_dir, 0700); !r) return std::unexpected(r.error());
  std::string path = lock_dir + "/" + std::to_string(index) + ".lock";
  UniqueFd fd(::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  if (!fd) return sys_fail("open " + path);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) == 0) return UidSlot(index, std::move(fd));
  if (errno != EWOULDBLOCK) return sys_fail("flock " + path);
  return std::nullopt;
}

Result<UidSlot> UidSlot::acquire(const std::string& lock_dir, uint32_t max_slots) {
  max_slots = std::min(max_slots, kMaxSlots);
  for (uint32_t i = 0; i < max_slots; ++i) {
    auto slot = try_acquire(i, lock_dir);
    if (!slot) return std::unexpected(slot.error());
    if (*slot) return std::move(**slot);
  }
  return fail(ErrorCode::limit, "all " + std::to_string(max_slots) + " sandbox uid slots are in use");
}

Result<void> write_id_maps(pid_t pid, uint32_t host_base) {
  std::string map = "0 " + std::to_string(host_base) + " " + std::to_string(kIdsPerSlot) + "\n";
  std::string proc = "/proc/" + std::to_string(pid);
  if (auto r = write_file(proc + "/uid_map", map); !r) return r;
  return write_file(proc + "/gid_map", map);
}

}  // namespace cela::jail
