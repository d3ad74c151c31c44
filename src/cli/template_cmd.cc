#include "cli/template_cmd.h"

#include <cstdio>
#include <memory>
#include <string>

#include "cli/template_build_cmd.h"
#include "rootfs/template.h"

namespace cela::cli {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUnknownTemplate = 2;

struct TemplateOptions {
  rootfs::TemplateStore store;
  std::string name;
  bool force = false;
  std::string mirror;
  std::string suite = "bookworm";
  TemplateFileBuild from_file;  // -f FILE
  std::string import_path;
};

int complain(const Error& e) {
  std::fprintf(stderr, "cela: %s\n", e.message().c_str());
  return kExitFailed;
}

int unknown(const std::string& name) {
  std::fprintf(stderr,
               "cela: unknown template '%s' (templates: base, host; see `cela template ls`)\n",
               name.c_str());
  return kExitUnknownTemplate;
}

// "sha256:0123456789ab" from "sha256:<64 hex>".
std::string short_digest(const std::string& digest) {
  return digest.substr(0, 19);
}

void print_summary(const rootfs::Template& t) {
  std::printf("%s %s\n", t.name.c_str(), t.version.c_str());
  std::printf("  digest      %s\n", t.digest.c_str());
  std::printf("  built_at    %s\n", t.built_at.c_str());
  std::printf("  packages    %zu\n", t.packages.size());
  for (const auto& layer : t.layers) std::printf("  layer       %s\n", layer.c_str());
  for (const auto& b : t.binds)
    std::printf("  bind        %s -> %s (read-only)\n", b.source.c_str(), b.target.c_str());
  std::printf("  allow_sudo  %s\n", t.allow_sudo ? "yes" : "no");
  std::printf("  dev_only    %s\n", t.dev_only ? "yes" : "no");
}

int build(const TemplateOptions& o) {
  if (!o.from_file.file.empty()) return build_from_file(o.store, o.name, o.from_file);
  Result<rootfs::Template> t;
  if (o.name == "base") {
    rootfs::BaseBuildOptions options;
    options.mirror = o.mirror;
    options.suite = o.suite;
    options.force = o.force;
    t = rootfs::build_base_template(o.store, options);
  } else if (o.name == "host") {
    t = rootfs::ensure_host_template(o.store);
  } else {
    return unknown(o.name);
  }
  if (!t) return complain(t.error());
  print_summary(*t);
  return kExitOk;
}

int list(const TemplateOptions& o) {
  auto templates = rootfs::list_templates(o.store);
  if (!templates) return complain(templates.error());
  std::printf("%-12s %-20s %-19s %-20s %s\n", "NAME", "VERSION", "DIGEST", "BUILT_AT", "DEV_ONLY");
  for (const auto& t : *templates) {
    std::printf("%-12s %-20s %-19s %-20s %s\n", t.name.c_str(), t.version.c_str(),
                short_digest(t.digest).c_str(), t.built_at.c_str(), t.dev_only ? "yes" : "no");
  }
  return kExitOk;
}

int show(const TemplateOptions& o) {
  auto t = rootfs::load_template(o.store, o.name);
  if (!t) {
    if (t.error().code == ErrorCode::not_found || t.error().code == ErrorCode::invalid_argument)
      return unknown(o.name);
    return complain(t.error());
  }
  std::fputs(rootfs::template_to_json(*t).c_str(), stdout);
  return kExitOk;
}

}  // namespace

void add_template_commands(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand("template", "Build and inspect sandbox templates");
  cmd->require_subcommand(1);
  cmd->add_option("--templates-dir", opts->store.root, "Template store")->capture_default_str();
  cmd->add_option("--cache-dir", opts->store.cache, "Download cache reused by rebuilds")
      ->capture_default_str();

  CLI::App* build_cmd =
      cmd->add_subcommand("build", "Build a template (base: Debian + tools; host: dev-only)");
  build_cmd->fallthrough();
  build_cmd->add_option("name", opts->name, "base or host; with -f any name")->required();
  build_cmd->add_option("-f,--file", opts->from_file.file,
                        "Build from FILE: cela's JSON steps or a Dockerfile subset (docs/templates.md)");
  build_cmd->add_option("--context", opts->from_file.context,
                        "Directory COPY sources are read from (default: FILE's directory)");
  build_cmd->add_option("--build-arg", opts->from_file.build_args, "ARG value K=V (Dockerfile)");
  build_cmd->add_option("--ledger-dir", opts->from_file.ledger_dir,
                        "Host-wide admission ledger a local -f build's run steps take their grants from "
                        "(\"\" = none)")
      ->envname("CELA_LEDGER_DIR")
      ->capture_default_str();
  add_conn(build_cmd, opts->from_file.conn);
  build_cmd->add_flag("--force", opts->force,
                      "Rebuild even when the current version is up to date");
  build_cmd->add_option(
      "--mirror", opts->mirror,
      "Debian mirror URL (default: $CELA_DEBIAN_MIRROR, else the machine's apt sources)");
  build_cmd->add_option("--suite", opts->suite, "Debian suite")->capture_default_str();
  build_cmd->callback([opts, &exit_code] { exit_code = build(*opts); });

  CLI::App* import_cmd =
      cmd->add_subcommand("import", "Import an OCI image (an OCI layout tar or a `docker save` tar)");
  import_cmd->fallthrough();
  import_cmd->add_option("name", opts->name, "Template name")->required();
  import_cmd->add_option("path", opts->import_path, "The image archive")->required();
  add_conn(import_cmd, opts->from_file.conn);
  import_cmd->callback([opts, &exit_code] {
    exit_code = import_template(opts->store, opts->name, opts->import_path, opts->from_file.conn);
  });

  CLI::App* ls_cmd = cmd->add_subcommand("ls", "List templates and their current versions");
  ls_cmd->fallthrough();
  ls_cmd->callback([opts, &exit_code] { exit_code = list(*opts); });

  CLI::App* show_cmd = cmd->add_subcommand("show", "Print a template's manifest as JSON");
  show_cmd->fallthrough();
  show_cmd->add_option("name", opts->name, "Template name")->required();
  show_cmd->callback([opts, &exit_code] { exit_code = show(*opts); });
}

}  // namespace cela::cli
