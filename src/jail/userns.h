// User namespaces and host uid ranges.
//
// Every live sandbox owns one slot; slot N maps ids 0..65535 inside to
// kUidBase + N*65536 .. +65535 on the host, so no two sandboxes share a host uid and
// none maps to host root or to a host account. Slots are claimed with flock(2) on a
// per-slot lock file: the kernel releases the lock when its holder dies, however it
// dies, so a crashed runner's slot becomes free again (its leftovers are cleaned by
// the next holder before reuse).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "common/error.h"
#include "common/fd.h"

namespace cela::jail {

inline constexpr uint32_t kUidBase = 0x10000000;  // 268435456: far above any account
inline constexpr uint32_t kIdsPerSlot = 65536;
inline constexpr uint32_t kMaxSlots = 4096;
inline constexpr const char* kSlotLockDir = "/run/cela/slots";

class UidSlot {
 public:
  // Claims the lowest free slot below `max_slots` (lock files under `lock_dir`);
  // ErrorCode::limit when every one is taken.
  static Result<UidSlot> acquire(const std::string& lock_dir = "/run/cela/slots", uint32_t max_slots = kMaxSlots);
  // Claims slot `index` if it is free; nullopt when another process holds it.
  static Result<std::optional<UidSlot>> try_acquire(uint32_t index,
                                                    const std::string& lock_dir = "/run/cela/slots");

  uint32_t index() const { return index_; }
  uint32_t host_base() const { return kUidBase + index_ * kIdsPerSlot; }

 private:
  UidSlot(uint32_t index, UniqueFd lock) : index_(index), lock_(std::move(lock)) {}
  uint32_t index_;
  UniqueFd lock_;
};

// Writes uid_map and gid_map of `pid` ("0 <host_base> 65536"). Host root may map any
// range, so setgroups stays allowed (sudo and apt inside need it).
Result<void> write_id_maps(pid_t pid, uint32_t host_base);

}  // namespace cela::jail
