// Pointing a session's package managers at the gateway (session/packages.h).
#include "session/packages.h"

#include "session/session_fs.h"

namespace cela::session {
namespace {

constexpr std::string_view kDoor = "http://127.0.0.1:3128";
constexpr std::string_view kKeyring = "/etc/apt/keyrings/cela-packages.gpg";
constexpr std::string_view kSourceParts = kPackageSourceParts;

std::string gateway(std::string_view path) { return "http://" + std::string(net::kPackagesHost) + std::string(path); }

}  // namespace

std::vector<std::string> package_env() {
  std::string door(kDoor);
  return {"PIP_INDEX_URL=" + gateway("/pypi/simple/"),
          "PIP_TRUSTED_HOST=" + std::string(net::kPackagesHost),
          "PIP_PROXY=" + door,
          "npm_config_registry=" + gateway("/npm/"),
          "npm_config_proxy=" + door,
          "npm_config_audit=false",
          "npm_config_fund=false",
          "npm_config_update_notifier=false"};
}

std::vector<PackageFile> package_files(const net::PackagesConfig& config, const std::string& keyring_bytes) {
  std::string door(kDoor);
  std::vector<PackageFile> files;
  files.push_back({"/etc/pip.conf",
                   "# cela: installs go through the package gateway (packages.mode)\n[global]\nindex-url = " +
                       gateway("/pypi/simple/") + "\ntrusted-host = " + std::string(net::kPackagesHost) +
                       "\nproxy = " + door + "\n"});
  files.push_back({"/etc/npmrc", "# cela: installs go through the package gateway (packages.mode)\nregistry=" +
                                     gateway("/npm/") + "\nproxy=" + door +
                                     "\naudit=false\nfund=false\nupdate-notifier=false\n"});
  std::string options = keyring_bytes.empty() ? "" : "[signed-by=" + std::string(kKeyring) + "] ";
  std::string sources = "# cela: the package gateway (packages.mode); the template's sources are replaced\n";
  for (const auto& suite : config.debian_suites) sources += "deb " + options + gateway("/debian") + " " + suite + "\n";
  files.push_back({"/etc/apt/sources.list", sources});
  // The template's own sources.list.d would be asked through the door too, and
  // refused: apt reads an empty directory instead.
  files.push_back({"/etc/apt/apt.conf.d/90cela-packages",
                   "Acquire::http::Proxy \"" + door + "\";\nAcquire::https::Proxy \"" + door +
                       "\";\nAcquire::Retries \"0\";\nDir::Etc::SourceParts \"" + std::string(kSourceParts) + "\";\n"});
  if (!keyring_bytes.empty()) files.push_back({std::string(kKeyring), keyring_bytes});
  return files;
}

Result<void> write_package_files(runtime::Instance& instance, const net::PackagesConfig& config,
                                 const std::string& keyring_bytes) {
  auto root = instance.open_root();
  if (!root) return std::unexpected(root.error());
  SessionFs fs(std::move(*root), instance.host_id(0), instance.host_id(0));
  if (auto m = fs.mkdir(kSourceParts, true); !m && m.error().code != ErrorCode::invalid_argument)
    return std::unexpected(m.error());
  for (const auto& f : package_files(config, keyring_bytes)) {
    WriteOptions o;
    o.mode = f.mode;
    o.make_parents = true;
    if (auto w = fs.write_file(f.path, f.text, o); !w)
      return std::unexpected(Error{w.error().code, w.error().err, "packages: writing " + f.path + ": " + w.error().context});
  }
  return {};
}

}  // namespace cela::session
