// `cela template build NAME -f FILE` and `cela template import NAME PATH`
// (docs/cli.md): through the daemon when one is given (--url, or $CELA_URL), else
// locally (host root, into the shared store).
#pragma once

#include <string>
#include <vector>

#include "cli/client_common.h"
#include "rootfs/template.h"

namespace cela::cli {

struct TemplateFileBuild {
  Conn conn;
  std::string file, context;
  std::vector<std::string> build_args;
  std::string ledger_dir = "/run/cela/grants";  // a local build's host-wide admission ("" = none)
};

// Exit code: 0, or kClientExitError/kClientExitUsage.
int build_from_file(const rootfs::TemplateStore& store, const std::string& name, const TemplateFileBuild& b);
int import_template(const rootfs::TemplateStore& store, const std::string& name, const std::string& path,
                    const Conn& conn);

}  // namespace cela::cli
