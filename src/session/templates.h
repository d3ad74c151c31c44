// Templates as tenants see them: the shared store (built-in templates: base, host and
// what the host's operator builds with `cela template build`), read-only to every
// tenant, and one private store per tenant (builds, snapshots and imports made through
// the API). A tenant sees its own templates and the shared ones, never another
// tenant's; a private template cannot take a shared template's name.
//
// References are "name" (the current version) or "name@version".
#pragma once

#include <string>
#include <vector>

#include "common/error.h"
#include "rootfs/template.h"

namespace cela::session {

struct TemplateRef {
  std::string name;
  std::string version;  // "" = current
};
// "name" or "name@version", both valid template names; invalid_argument otherwise.
Result<TemplateRef> parse_template_ref(const std::string& ref);

// "<tenant>/<name>@<version>" ("/" first for a shared one): which version a session
// runs on, for the in-use check.
inline std::string template_key(const rootfs::Template& t) { return t.tenant + "/" + t.name + "@" + t.version; }

class TemplateCatalog {
 public:
  explicit TemplateCatalog(rootfs::TemplateStore shared) : shared_(std::move(shared)) {}

  const rootfs::TemplateStore& shared() const { return shared_; }
  rootfs::TemplateStore private_store(const std::string& tenant_id) const {
    return rootfs::tenant_store(shared_, tenant_id);
  }

  // The tenant's own template of that name, else the shared one (tenant "" in the
  // result). not_found when neither has it (or that version).
  Result<rootfs::Template> resolve(const std::string& tenant_id, const std::string& ref) const;
  // Current versions: the tenant's and the shared ones, sorted by name.
  Result<std::vector<rootfs::Template>> list(const std::string& tenant_id) const;
  // Every version of one template the tenant can see, oldest first.
  Result<std::vector<rootfs::Template>> versions(const std::string& tenant_id, const std::string& name) const;
  // True when the shared store has a template of that name (tenants cannot write it).
  bool shared_name(const std::string& name) const;
  // A name a tenant may create a private version under: valid, and not shared.
  Result<void> writable_name(const std::string& name) const;

 private:
  rootfs::TemplateStore shared_;
};

}  // namespace cela::session
