// Rows of the audit table (migration 5) as the store reads and writes them. The store
// keeps them; obs/audit.h decides what goes in them and checks their chain.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cela::store {

struct AuditRow {
  int64_t seq = 0;
  int64_t at_ms = 0;
  std::string at, tenant_id, session_id, exec_id, kind, data, prev_hash, hash;
};

// GET /v1/audit and `cela audit verify`: every given condition holds.
struct AuditFilter {
  std::optional<std::string> tenant_id;  // nullopt: every tenant (verify, export)
  std::optional<std::string> session_id;
  std::vector<std::string> kinds;  // exact kinds, or prefixes ending in '.' ("limit.")
  std::optional<int64_t> since_ms;
  int64_t after_seq = 0;  // the paging cursor
  int64_t limit = 1000;
};

}  // namespace cela::store
