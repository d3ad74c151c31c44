// What the session layer tells about its sessions beyond their records: per-session
// metrics (read on demand from the cgroups, plus a short sampled history), limit
// events, and the audit records a tenant may read (session/observe.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "obs/audit.h"

namespace cela::session {

// One limit a session hit: kind oom | pids | disk | cpu_throttle | timeout | ttl |
// egress_bandwidth | egress_connections; `detail` in words; the exec it happened in, if any.
struct LimitEvent {
  std::string at;
  std::string kind;
  std::string detail;
  std::string exec_id;
};

// A point of the sampled history.
struct MetricSample {
  int64_t at_ms = 0;
  uint64_t cpu_ms = 0, memory_bytes = 0, pids = 0, disk_used_bytes = 0;
};

// GET /v1/sessions/{id}/metrics. A value the host cannot measure is nullopt.
struct SessionMetrics {
  std::string session_id, state;
  uint64_t cpu_ms = 0, cpu_throttled_ms = 0;
  uint64_t memory_bytes = 0, memory_peak_bytes = 0;
  uint64_t pids = 0, pids_peak = 0;
  std::optional<uint64_t> disk_used_bytes, disk_written_bytes;
  std::optional<uint64_t> net_tx_bytes, net_rx_bytes;
  uint64_t wall_ms = 0;
  uint64_t oom_kills = 0;
  uint64_t processes_executed = 0;
  uint64_t seccomp_violations = 0;  // denied syscalls attempted inside
  std::vector<LimitEvent> limit_events;
  std::vector<MetricSample> history;
  bool live = true;  // false: the session has ended, only recorded values remain
};

// GET /v1/audit filters (tenant-scoped by the caller).
struct AuditQuery {
  std::optional<std::string> session_id;
  std::vector<std::string> kinds;  // exact, or a prefix ending in '.'
  std::optional<int64_t> since_ms;
  int64_t after_seq = 0;
  int64_t limit = 100;
};

struct AuditPage {
  std::vector<obs::AuditRecord> records;
  int64_t next_after = 0;  // 0: no more
};

// Kinds a session's event stream carries.
inline const std::vector<std::string>& session_event_kinds() {
  static const std::vector<std::string> kinds{"session.", "limit.", "seccomp."};
  return kinds;
}

// Per-session byte counters another module measures (the egress proxy's relayed
// bytes): added here, shown in the session's metrics. Any thread.
void add_session_net_bytes(const std::string& session_id, uint64_t tx, uint64_t rx);

}  // namespace cela::session
