#include "session/tenants.h"

#include "store/store.h"

namespace cela::session {

Result<TenantRecord> Tenants::create(std::string_view name, const Quotas& quotas) {
  return store_.create_tenant(name, quotas);
}

Result<TenantRecord> Tenants::get(std::string_view tenant_id) { return store_.get_tenant(tenant_id); }

Result<std::vector<TenantRecord>> Tenants::list() { return store_.list_tenants(); }

Result<IssuedKey> Tenants::create_key(std::string_view tenant_id, bool admin, bool host_admin,
                                      store::KeyForm form) {
  return store_.create_key(tenant_id, admin, host_admin, form);
}

Result<std::optional<KeyRecord>> Tenants::authenticate(std::string_view key) { return store_.authenticate(key); }

}  // namespace cela::session
