// User namespaces, host uid ranges and the per-session kernel budgets that hang off
// the user namespace.
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
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace cela::jail {

inline constexpr uint32_t kUidBase = 0x10000000;  // 268435456: far above any account
inline constexpr uint32_t kIdsPerSlot = 65536;
// 32,768 slots end at host uid 0x8fffffff, well inside uid_t.
inline constexpr uint32_t kMaxSlots = 32768;
inline constexpr const char* kSlotLockDir = "/run/cela/slots";

class UidSlot {
 public:
  // Claims a free slot below `max_slots` (lock files under `lock_dir`), probing from a
  // random one so a claim stays O(1) however many sandboxes live on the host;
  // ErrorCode::limit when every one is taken.
  static Result<UidSlot> acquire(const std::string& lock_dir = "/run/cela/slots", uint32_t max_slots = kMaxSlots);
  // Claims slot `index` if it is free; nullopt when another process holds it.
  static Result<std::optional<UidSlot>> try_acquire(uint32_t index,
                                                    const std::string& lock_dir = "/run/cela/slots");

  uint32_t index() const { return index_; }
  uint32_t host_base() const { return kUidBase + index_ * kIdsPerSlot; }

 private:
  // try_acquire without making `lock_dir`: the caller has.
  static Result<std::optional<UidSlot>> claim(uint32_t index, const std::string& lock_dir);
  UidSlot(uint32_t index, UniqueFd lock) : index_(index), lock_(std::move(lock)) {}
  uint32_t index_;
  UniqueFd lock_;
};

// The kernel keeps several budgets per (user namespace, uid), each charged up the chain
// of namespaces to the uid that owns the namespace: inotify instances and watches,
// namespaces, queued signals, POSIX message queue bytes, locked shm. A sandbox's user
// namespace is owned by its slot's host uid (host_base), so these are the session's
// own, never host root's; the limits below bound them per session.
struct UserNsLimit {
  std::string name;  // a file of /proc/sys/user (user_ns_limit_names())
  uint64_t value = 0;
};

struct KernelBudgets {
  // rlimits of init and every exec, and (as the rlimits of the namespace's creator)
  // the ceiling of the whole session, whatever uid inside spends them.
  uint64_t sigpending = 4096;        // RLIMIT_SIGPENDING: queued signals
  uint64_t msgqueue_bytes = 819200;  // RLIMIT_MSGQUEUE: POSIX message queue bytes
  uint64_t memlock_bytes = 8 << 20;  // RLIMIT_MEMLOCK
  // Written into the session's namespace before anything runs in it. Each bounds one
  // uid inside; the session as a whole is also bounded by the host's value (the
  // owner's counter in the host namespace).
  std::vector<UserNsLimit> user_ns = default_user_ns_limits();

  static std::vector<UserNsLimit> default_user_ns_limits();
};

// The names /proc/sys/user may hold (max_inotify_instances, max_user_namespaces, ...).
const std::vector<std::string>& user_ns_limit_names();
// invalid_argument naming the first unknown name.
Result<void> check_user_ns_limits(const std::vector<UserNsLimit>& limits);

// Writes uid_map and gid_map of `pid` ("0 <host_base> 65536"). Host root may map any
// range, so setgroups stays allowed (sudo and apt inside need it).
Result<void> write_id_maps(pid_t pid, uint32_t host_base);

}  // namespace cela::jail
