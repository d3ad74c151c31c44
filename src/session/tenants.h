// Tenants and their API keys, as the API sees them: who may call, with which rights.
// Threads: any (the store serializes its own access); nothing here touches session
// state, so no call waits on the reactor or on sandbox code.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "session/types.h"

namespace cela::store {
class Store;
}

namespace cela::session {

class Tenants {
 public:
  explicit Tenants(store::Store& store) : store_(store) {}

  Result<TenantRecord> create(std::string_view name, const Quotas& quotas);
  Result<TenantRecord> get(std::string_view tenant_id);
  Result<std::vector<TenantRecord>> list();  // oldest first
  // A new key; its plaintext is in the answer only. `host_admin` keys act across
  // tenants (only a host admin may mint one: the API checks the caller).
  // form: KeyForm::e2b spells it as E2B's SDKs expect (`e2b_<hex>`), nothing else differs.
  Result<IssuedKey> create_key(std::string_view tenant_id, bool admin, bool host_admin,
                               store::KeyForm form = store::KeyForm::cela);
  // The key's record when `key` is live (not revoked), nullopt otherwise.
  Result<std::optional<KeyRecord>> authenticate(std::string_view key);

 private:
  store::Store& store_;
};

}  // namespace cela::session
