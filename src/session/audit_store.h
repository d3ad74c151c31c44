// The audit log's backend in the state store (obs::AuditBackend over store::Store),
// and the checks and reads built on it: `cela audit verify`, GET /v1/audit, session
// events.
#pragma once

#include <vector>

#include "obs/audit.h"
#include "store/store.h"

namespace cela::session {

class StoreAuditBackend final : public obs::AuditBackend {
 public:
  explicit StoreAuditBackend(store::Store& store) : store_(store) {}
  Result<void> append(const obs::AuditRecord& record) override;
  Result<obs::ChainAnchor> head() override;

 private:
  store::Store& store_;
};

obs::AuditRecord to_audit_record(store::AuditRow row);

struct AuditVerification {
  int64_t checked = 0;
  int64_t anchor_seq = 0;
  std::vector<std::string> problems;  // empty: the chain holds
};
// Reads every stored record in order, from the anchor, and checks the chain.
Result<AuditVerification> verify_audit(store::Store& store);

}  // namespace cela::session
