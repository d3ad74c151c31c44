#include "session/templates.h"

#include <sys/stat.h>

#include <algorithm>

namespace cela::session {

Result<TemplateRef> parse_template_ref(const std::string& ref) {
  TemplateRef out;
  auto at = ref.find('@');
  out.name = ref.substr(0, at);
  if (at != std::string::npos) out.version = ref.substr(at + 1);
  if (!rootfs::valid_template_name(out.name) || (at != std::string::npos && !rootfs::valid_template_name(out.version)))
    return fail(ErrorCode::invalid_argument, "bad template reference `" + ref + "` (want NAME or NAME@VERSION)");
  return out;
}

namespace {

Result<rootfs::Template> load(const rootfs::TemplateStore& store, const TemplateRef& ref) {
  return ref.version.empty() ? rootfs::load_template(store, ref.name)
                             : rootfs::load_template_version(store, ref.name, ref.version);
}

bool has_template_dir(const rootfs::TemplateStore& store, const std::string& name) {
  struct stat st {};
  return ::stat((store.root + "/" + name).c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

bool TemplateCatalog::shared_name(const std::string& name) const {
  return name == rootfs::kHostTemplate || has_template_dir(shared_, name);
}

Result<void> TemplateCatalog::writable_name(const std::string& name) const {
  if (!rootfs::valid_template_name(name))
    return fail(ErrorCode::invalid_argument,
                "bad template name `" + name + "` (letters, digits, '.', '_', '-'; at most 64; first alnum)");
  if (shared_name(name))
    return fail(ErrorCode::permission_denied, "template `" + name + "` is a shared template: it is read-only");
  return {};
}

Result<rootfs::Template> TemplateCatalog::resolve(const std::string& tenant_id, const std::string& ref_text) const {
  auto ref = parse_template_ref(ref_text);
  if (!ref) return std::unexpected(ref.error());
  if (!tenant_id.empty() && !shared_name(ref->name)) {
    auto own = load(private_store(tenant_id), *ref);
    if (own) {
      own->tenant = tenant_id;
      return own;
    }
    if (own.error().code != ErrorCode::not_found) return own;
  }
  return load(shared_, *ref);
}

Result<std::vector<rootfs::Template>> TemplateCatalog::list(const std::string& tenant_id) const {
  auto shared = rootfs::list_templates(shared_);
  if (!shared) return shared;
  std::vector<rootfs::Template> out = std::move(*shared);
  if (!tenant_id.empty()) {
    auto own = rootfs::list_templates(private_store(tenant_id));
    if (!own) return own;
    for (auto& t : *own) {
      if (shared_name(t.name)) continue;
      t.tenant = tenant_id;
      out.push_back(std::move(t));
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

Result<std::vector<rootfs::Template>> TemplateCatalog::versions(const std::string& tenant_id,
                                                                const std::string& name) const {
  if (!rootfs::valid_template_name(name)) return fail(ErrorCode::invalid_argument, "bad template name `" + name + "`");
  if (shared_name(name)) {
    if (name == rootfs::kHostTemplate && !has_template_dir(shared_, name)) {
      auto t = rootfs::load_template(shared_, name);  // generated on first use
      if (!t) return std::unexpected(t.error());
    }
    return rootfs::list_versions(shared_, name);
  }
  if (tenant_id.empty()) return fail(ErrorCode::not_found, "template " + name + " not found");
  auto own = rootfs::list_versions(private_store(tenant_id), name);
  if (own)
    for (auto& t : *own) t.tenant = tenant_id;
  return own;
}

}  // namespace cela::session
