// The `base` template: Debian minbase from debootstrap plus the tools sandboxes are
// promised (python3 with pip and venv, node with npm, git, curl, sudo, ps), a `user`
// account with passwordless sudo, and no apt lists, caches or resolver config.
//
// Why two stages: debootstrap's own --include resolver cannot place npm's large
// dependency tree (measured: dozens of node-* packages left unconfigured), so
// debootstrap lays down minbase and apt-get installs the rest inside the chroot.
// Both stages run in a private mount namespace (build_process.h). Downloads are kept
// in <cache>/debootstrap and <cache>/apt-archives, so rebuilds fetch only indexes.
#include "rootfs/base_template.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <optional>
#include <sstream>

#include "common/fd.h"
#include "common/fs.h"
#include "rootfs/build_process.h"
#include "rootfs/layers.h"
#include "rootfs/store_io.h"

namespace cela::rootfs {

namespace {

// Bump when a build step in this file changes what the layer holds; it is part of the
// recipe, so every store rebuilds once.
constexpr int kRecipeVersion = 1;

constexpr char kDebootstrap[] = "/usr/sbin/debootstrap";

// Runs as /bin/sh inside the chroot with the packages as "$@". apt's download
// sandbox user is switched off because the archive dir is a host directory bound in;
// unsafe-io skips dpkg's per-file fsync (the commit syncs the whole tree once).
constexpr char kSetupScript[] = R"(set -eu
apt_get() {
  apt-get -q -o APT::Sandbox::User=root -o Dpkg::Use-Pty=0 \
    -o Dpkg::Options::=--force-unsafe-io "$@"
}
apt_get update
apt_get install -y --no-install-recommends "$@"
groupadd --gid 1000 user
useradd --uid 1000 --gid 1000 --create-home --home-dir /home/user --shell /bin/bash user
)";

constexpr char kSudoers[] = "user ALL=(ALL) NOPASSWD:ALL\n";
constexpr char kHostname[] = "cela\n";
// sudo resolves the hostname on every call and warns when it cannot.
constexpr char kHosts[] =
    "127.0.0.1\tlocalhost\n"
    "127.0.1.1\tcela\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n";
// invoke-rc.d asks this before starting a service: no daemons in the build chroot.
constexpr char kPolicyRcD[] = "#!/bin/sh\nexit 101\n";

using Stanza = std::map<std::string, std::string>;

std::string trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::vector<std::string> words(std::string_view s) {
  std::vector<std::string> out;
  std::istringstream in{std::string(s)};
  for (std::string w; in >> w;) out.push_back(std::move(w));
  return out;
}

bool contains(const std::vector<std::string>& v, std::string_view x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// RFC 822-style stanzas (apt's deb822 sources, dpkg's status file). Keys lower-cased;
// continuation lines joined with '\n'; '#' lines are comments.
std::vector<Stanza> parse_stanzas(const std::string& text) {
  std::vector<Stanza> out;
  Stanza current;
  std::string last_key;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] == '#') continue;
    if (trim(line).empty()) {
      if (!current.empty()) out.push_back(std::move(current));
      current.clear();
      last_key.clear();
      continue;
    }
    if (line[0] == ' ' || line[0] == '\t') {
      if (!last_key.empty()) current[last_key] += "\n" + trim(line);
      continue;
    }
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = trim(std::string_view(line).substr(0, colon));
    std::transform(key.begin(), key.end(), key.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    current[key] = trim(std::string_view(line).substr(colon + 1));
    last_key = key;
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

std::optional<std::string> mirror_from_deb822(const std::string& text, const std::string& suite) {
  for (const auto& stanza : parse_stanzas(text)) {
    auto field = [&](const char* key) {
      auto it = stanza.find(key);
      return it == stanza.end() ? std::string() : it->second;
    };
    std::string enabled = field("enabled");
    if (enabled == "no" || enabled == "false") continue;
    if (!contains(words(field("types")), "deb")) continue;
    if (!contains(words(field("suites")), suite)) continue;
    auto uris = words(field("uris"));
    if (!uris.empty()) return uris.front();
  }
  return std::nullopt;
}

std::optional<std::string> mirror_from_one_line(const std::string& text, const std::string& suite) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (size_t hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    auto tokens = words(line);
    if (tokens.size() < 3 || tokens[0] != "deb") continue;
    size_t i = 1;
    if (tokens[1].starts_with('[')) {  // "[ arch=amd64 signed-by=… ]" options
      while (i < tokens.size() && !tokens[i].ends_with(']')) ++i;
      ++i;
    }
    if (i + 1 < tokens.size() && tokens[i + 1] == suite) return tokens[i];
  }
  return std::nullopt;
}

std::vector<std::string> files_with_suffix(const std::string& dir, std::string_view suffix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (const dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name.size() > suffix.size() && name.ends_with(suffix)) out.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> tool_environment() {
  std::vector<std::string> env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                                  "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"};
  for (const char* name :
       {"http_proxy", "https_proxy", "no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"}) {
    if (const char* value = std::getenv(name)) env.push_back(std::string(name) + "=" + value);
  }
  return env;
}

Result<void> remove_if_present(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return sys_fail("remove " + path);
  return {};
}

// Empties `dir` except for the names in `keep`.
Result<void> empty_dir(const std::string& dir, std::initializer_list<std::string_view> keep) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return {};
    return sys_fail("opendir " + dir);
  }
  std::vector<std::string> doomed;
  while (const dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name == "." || name == ".." || std::find(keep.begin(), keep.end(), name) != keep.end())
      continue;
    doomed.push_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  for (const auto& path : doomed) {
    if (auto r = remove_tree(path); !r) return r;
  }
  return {};
}

[[gnu::format(printf, 1, 2)]] void progress(const char* format, ...) {
  std::va_list args;
  va_start(args, format);
  std::fputs("base: ", stderr);
  std::vfprintf(stderr, format, args);
  std::fputc('\n', stderr);
  va_end(args);
}

// The end of the build log, for the error report.
void print_log_tail(const std::string& log_path) {
  auto text = read_file(log_path);
  if (!text) return;
  std::vector<std::string_view> lines;
  std::string_view rest = *text;
  while (!rest.empty()) {
    size_t nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  size_t from = lines.size() > 20 ? lines.size() - 20 : 0;
  std::fprintf(stderr, "base: last lines of %s:\n", log_path.c_str());
  for (size_t i = from; i < lines.size(); ++i)
    std::fprintf(stderr, "  %.*s\n", static_cast<int>(lines[i].size()), lines[i].data());
}

// libnss-myhostname's postinst appends itself to the hosts line; put it before dns
// so the sandbox's own name resolves without trying a resolver it cannot reach.
Result<void> set_nsswitch_hosts(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  std::string out;
  std::istringstream in(*text);
  bool replaced = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("hosts:")) {
      line = "hosts:          files myhostname dns";
      replaced = true;
    }
    out += line + "\n";
  }
  if (!replaced) out += "hosts:          files myhostname dns\n";
  return write_file_exact(path, out, 0644);
}

class BaseBuild {
 public:
  BaseBuild(const TemplateStore& store, const BaseBuildOptions& options, std::string mirror,
            std::string layer, int log_fd)
      : store_(store),
        options_(options),
        mirror_(std::move(mirror)),
        layer_(std::move(layer)),
        log_fd_(log_fd) {}

  Result<void> debootstrap() {
    log_step("debootstrap");
    BuildCommand cmd;
    cmd.argv = {kDebootstrap,
                "--variant=minbase",
                "--cache-dir=" + store_.cache + "/debootstrap",
                options_.suite,
                layer_,
                mirror_};
    cmd.env = tool_environment();
    cmd.output_fd = log_fd_;
    return run_in_private_mount_ns(cmd);
  }

  Result<void> install_packages(const std::vector<std::string>& packages) {
    log_step("apt-get install");
    // Network for apt comes from the host namespace; its resolver config is in the
    // layer only until finish() removes it.
    auto resolv = read_file("/etc/resolv.conf");
    if (!resolv) return std::unexpected(resolv.error());
    if (auto r = remove_if_present(layer_ + "/etc/resolv.conf"); !r) return r;
    if (auto r = write_file_exact(layer_ + "/etc/resolv.conf", *resolv, 0644); !r) return r;
    if (auto r = write_file_exact(layer_ + "/usr/sbin/policy-rc.d", kPolicyRcD, 0755); !r) return r;

    BuildCommand cmd;
    cmd.argv = {"/bin/sh", "-c", kSetupScript, "sh"};
    cmd.argv.insert(cmd.argv.end(), packages.begin(), packages.end());
    cmd.env = tool_environment();
    cmd.mounts = {
        {"proc", layer_ + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC},
        {"/dev", layer_ + "/dev", "", MS_BIND | MS_REC},
        {store_.cache + "/apt-archives", layer_ + "/var/cache/apt/archives", "", MS_BIND},
    };
    cmd.chroot = layer_;
    cmd.output_fd = log_fd_;
    return run_in_private_mount_ns(cmd);
  }

  Result<void> finish() {
    const std::string etc = layer_ + "/etc";
    if (auto r = make_dir_exact(etc + "/sudoers.d", 0755); !r) return r;
    if (auto r = write_file_exact(etc + "/sudoers.d/user", kSudoers, 0440); !r) return r;
    if (auto r = write_file_exact(etc + "/hostname", kHostname, 0644); !r) return r;
    if (auto r = write_file_exact(etc + "/hosts", kHosts, 0644); !r) return r;
    if (auto r = set_nsswitch_hosts(etc + "/nsswitch.conf"); !r) return r;
    // Build-time only: the host's resolver, the no-services policy, apt's indexes
    // and downloads (the .debs live on in the cache outside the layer).
    for (const char* path : {"/etc/resolv.conf", "/usr/sbin/policy-rc.d",
                             "/var/cache/apt/pkgcache.bin", "/var/cache/apt/srcpkgcache.bin"}) {
      if (auto r = remove_if_present(layer_ + path); !r) return r;
    }
    if (auto r = empty_dir(layer_ + "/var/lib/apt/lists", {}); !r) return r;
    if (auto r = empty_dir(layer_ + "/var/cache/apt/archives", {"partial", "lock"}); !r) return r;
    if (auto r = empty_dir(layer_ + "/var/cache/apt/archives/partial", {}); !r) return r;
    return remove_tree(layer_ + "/debootstrap");  // left behind only by a failed run
  }

 private:
  void log_step(const char* what) {
    std::string line = "\n== cela base build: " + std::string(what) + " ==\n";
    [[maybe_unused]] ssize_t n = ::write(log_fd_, line.data(), line.size());
  }

  const TemplateStore& store_;
  const BaseBuildOptions& options_;
  std::string mirror_;
  std::string layer_;
  int log_fd_;
};

}  // namespace

const std::vector<std::string>& base_packages() {
  static const std::vector<std::string> kPackages = {
      "bash",
      "ca-certificates",
      "coreutils",
      "curl",
      "git",
      // Resolves the sandbox's own hostname (cela-N) without an /etc/hosts entry;
      // sudo looks it up on every call and warns when that fails.
      "libnss-myhostname",
      "nodejs",
      "npm",
      "procps",
      "python3",
      "python3-pip",
      "python3-venv",
      "sudo",
  };
  return kPackages;
}

std::string base_recipe(const std::string& suite, std::vector<std::string> packages) {
  std::sort(packages.begin(), packages.end());
  packages.erase(std::unique(packages.begin(), packages.end()), packages.end());
  Sha256 h;
  h.update("cela base recipe " + std::to_string(kRecipeVersion) + "\n");
  h.update("suite " + suite + "\n");
  for (const auto& p : packages) h.update("package " + p + "\n");
  h.update("script\n");
  h.update(kSetupScript);
  return h.hex_final();
}

Result<std::string> debian_mirror_from_apt(const std::string& apt_dir, const std::string& suite) {
  for (const auto& path : files_with_suffix(apt_dir + "/sources.list.d", ".sources")) {
    auto text = read_file(path);
    if (!text) continue;
    if (auto mirror = mirror_from_deb822(*text, suite)) return *mirror;
  }
  std::vector<std::string> one_line = {apt_dir + "/sources.list"};
  for (auto& path : files_with_suffix(apt_dir + "/sources.list.d", ".list"))
    one_line.push_back(std::move(path));
  for (const auto& path : one_line) {
    auto text = read_file(path);
    if (!text) continue;
    if (auto mirror = mirror_from_one_line(*text, suite)) return *mirror;
  }
  return fail(ErrorCode::not_found, "no Debian mirror for " + suite + " in the apt sources under " +
                                        apt_dir + " (pass --mirror or set CELA_DEBIAN_MIRROR)");
}

Result<std::string> resolve_debian_mirror(const BaseBuildOptions& options) {
  if (!options.mirror.empty()) return options.mirror;
  if (const char* env = std::getenv("CELA_DEBIAN_MIRROR"); env != nullptr && *env != '\0')
    return std::string(env);
  return debian_mirror_from_apt("/etc/apt", options.suite);
}

Result<std::vector<std::string>> installed_packages(const std::string& dpkg_status_path) {
  auto text = read_file(dpkg_status_path);
  if (!text) return std::unexpected(text.error());
  std::vector<std::string> out;
  for (const auto& stanza : parse_stanzas(*text)) {
    auto status = stanza.find("status");
    auto package = stanza.find("package");
    auto version = stanza.find("version");
    if (status == stanza.end() || package == stanza.end() || version == stanza.end()) continue;
    if (status->second != "install ok installed") continue;
    out.push_back(package->second + "=" + version->second);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<Template> build_base_template(const TemplateStore& store_in,
                                     const BaseBuildOptions& options) {
  auto started = std::chrono::steady_clock::now();
  if (!valid_template_name(options.suite))
    return fail(ErrorCode::invalid_argument, "bad suite '" + options.suite + "'");
  // debootstrap wants absolute paths, and so do the mounts.
  TemplateStore store{std::filesystem::absolute(store_in.root).lexically_normal().string(),
                      std::filesystem::absolute(store_in.cache).lexically_normal().string()};
  const std::string recipe = base_recipe(options.suite, base_packages());

  auto up_to_date = [&]() -> std::optional<Template> {
    if (options.force) return std::nullopt;
    auto current = load_template(store, "base");
    if (!current || current->recipe != recipe) return std::nullopt;
    progress("up to date (version %s)", current->version.c_str());
    return std::move(*current);
  };
  if (auto t = up_to_date()) return std::move(*t);

  if (::geteuid() != 0)
    return fail(ErrorCode::permission_denied, "building the base template needs root");
  if (::access(kDebootstrap, X_OK) != 0)
    return sys_fail(std::string(kDebootstrap) + " (install the Debian package debootstrap)");
  auto mirror = resolve_debian_mirror(options);
  if (!mirror) return std::unexpected(mirror.error());

  for (const char* sub : {"/debootstrap", "/apt-archives/partial"}) {
    if (auto r = make_dirs(store.cache + sub, 0755); !r) return std::unexpected(r.error());
  }
  auto staged = StagedVersion::create(store, "base");
  if (!staged) return std::unexpected(staged.error());
  auto lock = BuildLock::acquire(store.root + "/base");
  if (!lock) return std::unexpected(lock.error());
  if (auto t = up_to_date()) return std::move(*t);  // another build finished meanwhile

  const std::string log_path = store.cache + "/base-build.log";
  UniqueFd log(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600));
  if (!log) return sys_fail("open " + log_path);

  const std::string version = next_version_name(store, "base");
  const std::string layer = staged->layer_dir();
  BaseBuild build(store, options, *mirror, layer, log.get());
  auto step_failed = [&](const Error& e) -> Result<Template> {
    print_log_tail(log_path);
    return fail(e.code, "base build: " + e.message() + " (log: " + log_path + ")");
  };

  progress("building version %s (Debian %s, %zu packages on minbase, mirror %s)", version.c_str(),
           options.suite.c_str(), base_packages().size(), mirror->c_str());
  auto step_started = std::chrono::steady_clock::now();
  auto step_done = [&] {
    auto now = std::chrono::steady_clock::now();
    progress("      done in %.1f s", std::chrono::duration<double>(now - step_started).count());
    step_started = now;
  };
  progress("[1/4] debootstrap --variant=minbase");
  if (auto r = build.debootstrap(); !r) return step_failed(r.error());
  step_done();
  progress("[2/4] apt-get install %zu packages, create user", base_packages().size());
  if (auto r = build.install_packages(base_packages()); !r) return step_failed(r.error());
  step_done();
  progress("[3/4] sudoers, hostname; drop resolv.conf, apt lists and caches");
  if (auto r = build.finish(); !r) return step_failed(r.error());
  auto packages = installed_packages(layer + "/var/lib/dpkg/status");
  if (!packages) return std::unexpected(packages.error());
  step_done();
  progress("[4/4] digest and commit");
  auto digest = layer_digest(layer);
  if (!digest) return std::unexpected(digest.error());

  Template t;
  t.name = "base";
  t.version = version;
  t.digest = *digest;
  t.built_at = cela::now_rfc3339();
  t.layers = {layer};
  t.packages = std::move(*packages);
  t.allow_sudo = true;
  t.dev_only = false;
  t.recipe = recipe;
  t.built_by = "host";
  t.source = "debootstrap";
  t.size_bytes = tree_bytes(layer);
  auto committed = staged->commit(t);
  if (!committed) return committed;
  step_done();
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  progress("built version %s in %.0f s (%zu packages, %s)", version.c_str(), seconds,
           committed->packages.size(), committed->digest.substr(0, 19).c_str());
  return committed;
}

}  // namespace cela::rootfs
