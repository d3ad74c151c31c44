// Templates: the read-only root filesystems sandboxes start from.
//
// A template version is a stack of read-only layer directories (bottom first) plus
// read-only bind mounts of host paths (used only by the dev-only `host` template),
// described by a manifest. The jail shows every layer and bind through a read-only
// idmapped mount, so files owned by host root appear root-owned inside the sandbox
// while the sandbox itself runs on an unprivileged host uid range.
//
// On disk (store root defaults to /var/lib/cela/templates, mode 0700 because layers
// hold setuid-root files that are setuid-root on the host too):
//   <store>/<name>/<version>/manifest.json
//   <store>/<name>/<version>/layer/          the rootfs tree
//   <store>/<name>/current                   text file naming the current version
//   <store>/<name>/.lock                     flock(2) held while a version is built
//   <store>/<name>/.staging-XXXXXX/          a version being built (see StagedVersion)
//
// manifest.json: {"name","version","digest","built_at","packages":[..],"allow_sudo",
// "user":{"name","uid","gid","home"},
// "dev_only","layers":["layer"],"binds":[{"source","target"}],"recipe"}. Layer paths
// are stored relative to the version dir and loaded as absolute paths.
//
// Files: template.cc (store, manifest, StagedVersion), digest.cc (layer_digest),
// host_template.cc, base_template.cc (+ base_template.h: its testable pieces),
// build_process.cc (build tools in a private mount namespace), store_io.cc (helpers).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace cela {
class JsonFields;
}

namespace cela::rootfs {

struct HostBind {
  std::string source;  // host path, e.g. /usr
  std::string target;  // path inside the sandbox, e.g. /usr
};

// The account code runs as by default (exec `user: "user"`); root is always uid 0
// with home /root. Manifests without a "user" object get these defaults.
struct TemplateUser {
  std::string name = "user";
  uint32_t uid = 1000;
  uint32_t gid = 1000;
  std::string home = "/home/user";
};

// One read-only layer of a version's stack, as the manifest describes it.
struct LayerMeta {
  std::string digest;       // layer_digest of the tree
  uint64_t size_bytes = 0;  // bytes of regular-file content in it
  std::string created_by;   // the step, "debootstrap", "snapshot of s-…", "oci layer …"
};

// One /etc/passwd line ("name:x:uid:gid:gecos:home:shell") as a TemplateUser: only
// an account with uid and gid in 1..65535 and an absolute home (else nullopt).
std::optional<TemplateUser> passwd_account(std::string_view line);

// A process a session of the template starts as soon as it boots (a kernel server, a
// web app), before the session is handed out: E2B's "start command". With a
// ready_port, the session is ready once something accepts on 127.0.0.1:ready_port
// inside (the create fails after ready_timeout_s).
struct StartCommand {
  std::string cmd;     // a shell line (sh -c)
  std::string user;    // "root" or the template's user (the default)
  uint16_t ready_port = 0;
  uint32_t ready_timeout_s = 60;
};

// {"cmd", "user"?, "ready_port"?, "ready_timeout_s"?}: the manifest's `start` and a
// build file's. cmd non-empty; user "root" or the template's user ("" = the latter);
// ready_port 1..65535; ready_timeout_s 1..600.
Result<StartCommand> parse_start_command(const JsonFields& f);

struct Template {
  std::string name;
  std::string version;                // e.g. "2026.11.29-1" or a digest prefix
  std::string digest;                 // "sha256:<hex>" of the layer tree (see layer_digest)
  std::string built_at;               // RFC 3339 UTC
  std::vector<std::string> layers;    // absolute dirs, bottom first
  std::vector<HostBind> binds;        // read-only host binds (dev-only templates)
  std::vector<std::string> packages;  // "name=version" of what the layer holds
  TemplateUser user;                  // the unprivileged account execs run as
  bool allow_sudo = false;            // the template promises working sudo (no_new_privs off)
  bool dev_only = false;              // shows host files: never for untrusted production use
  std::string recipe;                 // sha256 hex of the build inputs; equal recipe = no rebuild
  // Parallel to `layers` when the manifest has it (builds, snapshots, imports); older
  // manifests of one layer get {digest, size unknown (0)}.
  std::vector<LayerMeta> layer_meta;
  std::vector<std::string> env;  // "K=V" every exec starts with (below the session's)
  std::string workdir;           // default cwd of execs ("" = the user's home)
  std::string built_by;          // tenant id, or "host" for the operator's builds
  uint64_t size_bytes = 0;       // sum of layer_meta sizes
  std::string parent;            // "name@version" the stack was built on ("" = none)
  std::string source;            // "debootstrap", "host", "build", "snapshot", "oci"
  // Other names the template is found under (load_template): "code-interpreter-v1".
  std::vector<std::string> aliases;
  std::optional<StartCommand> start;
  // Not in the manifest: "" for the shared store, else the tenant whose private store
  // holds the version (set when loaded).
  std::string tenant;
};

struct TemplateStore {
  std::string root = "/var/lib/cela/templates";
  std::string cache = "/var/cache/cela";  // downloaded .debs etc., reused by rebuilds
};

// Template names and versions become path components: [A-Za-z0-9][A-Za-z0-9._-]*,
// at most 64 characters.
bool valid_template_name(std::string_view name);

// The generated dev-only template (ensure_host_template).
inline constexpr std::string_view kHostTemplate = "host";

// Loads the current version of template `name` (not_found when absent). The `host`
// template is generated on first use. A name no template has is looked up among the
// current versions' aliases (the first template in name order that lists it).
Result<Template> load_template(const TemplateStore& store, const std::string& name);

// The template whose current version lists `alias` among its aliases, if any.
std::optional<std::string> alias_target(const TemplateStore& store, const std::string& alias);

// Loads one specific version (not_found when absent), whether current or not; an
// alias names its target's versions.
Result<Template> load_template_version(const TemplateStore& store, const std::string& name,
                                       const std::string& version);

// Generates (or refreshes) the dev-only `host` template: a small layer with a
// generated /etc (root and user accounts, no host secrets) and read-only binds of
// the host's /usr (the /bin /lib /lib64 /sbin links point into it). The version is
// "host-<12 hex digits of the layer digest>"; an unchanged layer keeps its version.
Result<Template> ensure_host_template(const TemplateStore& store);

struct BaseBuildOptions {
  std::string mirror;  // empty: $CELA_DEBIAN_MIRROR, else the machine's apt sources
  std::string suite = "bookworm";
  bool force = false;  // rebuild even when the current version has the same recipe
};

// Builds the `base` template (Debian minbase + the tools listed in docs) with
// debootstrap, stores it as a new read-only version with a manifest and makes it
// current. Progress goes to stderr, the tools' output to <cache>/base-build.log.
// Reuses the download cache. Needs root. Returns the current version unchanged
// when its recipe matches and !force.
Result<Template> build_base_template(const TemplateStore& store, const BaseBuildOptions& options);

// sha256 over a canonical walk of a directory tree (no symlink followed; depth
// first, each directory's entries sorted by name; for each entry its relative path,
// type, permission bits, uid, gid, and for regular files size and content, for
// symlinks the target, for devices the device number): "sha256:<hex>".
Result<std::string> layer_digest(const std::string& dir);

// Templates in the store: name -> current version, sorted by name. Names without a
// loadable current version are skipped.
Result<std::vector<Template>> list_templates(const TemplateStore& store);

// The manifest as JSON (layers as given in `t`, i.e. absolute for a loaded one).
std::string template_to_json(const Template& t);

// A template version being assembled: <store>/<name>/.staging-XXXXXX/ holding an
// empty layer/ dir the builder fills. commit() turns it into <store>/<name>/<version>
// (one rename, so a version dir is either complete or absent) and makes it current;
// the destructor removes an uncommitted staging dir.
class StagedVersion {
 public:
  // Creates the store root (0700) and <store>/<name> as needed.
  static Result<StagedVersion> create(const TemplateStore& store, const std::string& name);

  StagedVersion(StagedVersion&& other) noexcept;
  StagedVersion& operator=(StagedVersion&&) = delete;
  StagedVersion(const StagedVersion&) = delete;
  StagedVersion& operator=(const StagedVersion&) = delete;
  ~StagedVersion();

  const std::string& dir() const { return dir_; }
  std::string layer_dir() const { return dir_ + "/layer"; }

  // Writes manifest.json from `manifest` (name must match; version must be valid and
  // not exist yet; layers inside dir() are recorded relative to the version dir, other
  // absolute paths relative too), renames the staging dir to the version dir and
  // points `current` at it. Returns the version as load_template_version sees it.
  Result<Template> commit(const Template& manifest);

 private:
  StagedVersion(TemplateStore store, std::string name, std::string dir)
      : store_(std::move(store)), name_(std::move(name)), dir_(std::move(dir)) {}

  TemplateStore store_;
  std::string name_;
  std::string dir_;  // empty once committed or moved from
};

// Every loadable version of `name`, oldest first (by built_at, then version).
// not_found when the template has none.
Result<std::vector<Template>> list_versions(const TemplateStore& store, const std::string& name);

// Removes one version: its directory leaves the store in one rename (a create that
// loads it afterwards sees not_found), then it is deleted. `current` moves to the newest
// remaining version; with none left the template disappears. Layers are not touched
// (collect_layers does that).
Result<void> remove_version(const TemplateStore& store, const std::string& name, const std::string& version);

// "2026.11.29-N" with N one past the highest existing version of today in
// <store>/<name>.
std::string next_version_name(const TemplateStore& store, const std::string& name);

// A tenant's private store: <shared root>/.tenants/<tenant>, caches below it.
TemplateStore tenant_store(const TemplateStore& shared, const std::string& tenant_id);

// Points <store>/<name>/current at an existing version (write temp file + rename).
Result<void> set_current_version(const TemplateStore& store, const std::string& name,
                                 const std::string& version);

}  // namespace cela::rootfs
