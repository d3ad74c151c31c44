#include "session/file_policy.h"

#include <algorithm>

namespace cela::session {
namespace {

std::string root_of(std::string_view pattern) {
  std::string_view r = pattern.substr(0, pattern.size() - 3);  // drop "/**"
  return r.empty() ? "/" : std::string(r);
}

bool under(std::string_view path, std::string_view root) {
  if (root == "/") return true;
  return path == root || (path.starts_with(root) && path.size() > root.size() && path[root.size()] == '/');
}

Result<std::vector<std::string>> patterns(const JsonFields& f, std::string_view key,
                                          const std::vector<std::string>& base, bool narrow) {
  auto list = f.string_array(key);
  if (!list) return std::unexpected(list.error());
  if (!*list) return base;
  for (const auto& p : **list) {
    bool ok = p.size() >= 3 && p.starts_with("/") && p.ends_with("/**") && p.find('\0') == std::string::npos &&
              p.find("/../") == std::string::npos && p.find("/./") == std::string::npos &&
              p.substr(0, p.size() - 3).find('*') == std::string::npos && !p.starts_with("//");
    if (!ok) return std::unexpected(f.invalid(key, "patterns must be absolute \"DIR/**\" (a whole tree; \"/**\": all)"));
    if (narrow) {
      std::string root = root_of(p);
      bool inside = std::ranges::any_of(base, [&](const std::string& b) { return under(root, root_of(b)); });
      if (!inside)
        return fail(ErrorCode::policy_denied,
                    "`files." + std::string(key) + "` pattern " + p + " is outside what this tenant allows");
    }
  }
  return std::move(**list);
}

Result<uint64_t> size_mb(const JsonFields& f, std::string_view key, uint64_t base, bool narrow) {
  auto v = f.integer(key);
  if (!v) return std::unexpected(v.error());
  if (!*v) return base;
  if (**v < 1 || **v > (1 << 20)) return std::unexpected(f.invalid(key, "must be 1..1048576"));
  uint64_t bytes = static_cast<uint64_t>(**v) << 20;
  if (narrow && bytes > base)
    return fail(ErrorCode::policy_denied, "`files." + std::string(key) + "` is above this tenant's limit of " +
                                              std::to_string(base >> 20) + " MiB");
  return bytes;
}

}  // namespace

std::string_view to_string(SecretScan scan) {
  switch (scan) {
    case SecretScan::refuse: return "refuse";
    case SecretScan::redact: return "redact";
    case SecretScan::off: return "off";
  }
  return "refuse";
}

Result<FilePolicy> parse_file_policy(const JsonFields& f, const FilePolicy& base, bool narrow) {
  if (auto ok = f.only({"writable", "exportable", "max_upload_mb", "max_export_mb", "scan_secrets"}); !ok)
    return std::unexpected(ok.error());
  FilePolicy p = base;
  auto w = patterns(f, "writable", base.writable, narrow);
  if (!w) return std::unexpected(w.error());
  p.writable = std::move(*w);
  auto e = patterns(f, "exportable", base.exportable, narrow);
  if (!e) return std::unexpected(e.error());
  p.exportable = std::move(*e);
  auto up = size_mb(f, "max_upload_mb", base.max_upload_bytes, narrow);
  if (!up) return std::unexpected(up.error());
  p.max_upload_bytes = *up;
  auto ex = size_mb(f, "max_export_mb", base.max_export_bytes, narrow);
  if (!ex) return std::unexpected(ex.error());
  p.max_export_bytes = *ex;
  auto scan = f.string("scan_secrets");
  if (!scan) return std::unexpected(scan.error());
  if (*scan) {
    if (**scan == "refuse") p.scan_secrets = SecretScan::refuse;
    else if (**scan == "redact") p.scan_secrets = SecretScan::redact;
    else if (**scan == "off") p.scan_secrets = SecretScan::off;
    else return std::unexpected(f.invalid("scan_secrets", "must be \"refuse\", \"redact\" or \"off\""));
    // Turning the scan off widens what may leave.
    if (narrow && p.scan_secrets == SecretScan::off && base.scan_secrets != SecretScan::off)
      return fail(ErrorCode::policy_denied, "`files.scan_secrets` off is not allowed for this tenant");
  }
  return p;
}

std::vector<std::string> policy_roots(const std::vector<std::string>& pats) {
  std::vector<std::string> roots;
  for (const auto& p : pats) roots.push_back(root_of(p));
  return roots;
}

}  // namespace cela::session
