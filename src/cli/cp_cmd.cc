#include "cli/cp_cmd.h"

#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/client_common.h"

namespace cela::cli {
namespace {
using client::Client;

// ---- cp ----

// "SESSION:/path" → {session, path}; a local path otherwise.
std::optional<std::pair<std::string, std::string>> remote_of(const std::string& arg) {
  auto colon = arg.find(':');
  if (colon == std::string::npos || colon == 0 || arg.substr(0, colon).find('/') != std::string::npos)
    return std::nullopt;
  return std::pair{arg.substr(0, colon), arg.substr(colon + 1)};
}

int cp(const Conn& conn, const std::string& src, const std::string& dst) {
  auto rs = remote_of(src), rd = remote_of(dst);
  if (bool(rs) == bool(rd)) return usage("cp needs exactly one side as SESSION:/path and the other a local path");
  auto c = Client::make(conn.url, conn.key);
  if (!c) return report(c.error());
  if (rd) {  // upload
    std::ifstream in(src, std::ios::binary);
    if (!in) return report(Error{ErrorCode::not_found, errno, "open " + src});
    std::ostringstream data;
    data << in.rdbuf();
    auto r = c->request("PUT", session_path(rd->first) + "/files?path=" + client::url_encode(rd->second), data.str(),
                        {{"Content-Type", "application/octet-stream"}});
    if (!r) return report(r.error());
    return 0;
  }
  auto r = c->request("GET", session_path(rs->first) + "/files?path=" + client::url_encode(rs->second));
  if (!r) return report(r.error());
  std::string target = dst;
  struct stat st {};
  if (::stat(dst.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    auto slash = rs->second.rfind('/');
    target += "/" + (slash == std::string::npos ? rs->second : rs->second.substr(slash + 1));
  }
  std::ofstream out(target, std::ios::binary | std::ios::trunc);
  if (!out) return report(Error{ErrorCode::system, errno, "open " + target});
  out.write(r->body.data(), static_cast<std::streamsize>(r->body.size()));
  out.close();
  if (!out) return report(Error{ErrorCode::system, errno, "write " + target});
  return 0;
}

}  // namespace

void add_cp_command(CLI::App& app, int& exit_code) {
  struct CpOpts {
    Conn conn;
    std::string src, dst;
  };
  auto o = std::make_shared<CpOpts>();
  auto* p = app.add_subcommand("cp", "Copy one file: SESSION:/path <-> local path");
  add_conn(p, o->conn);
  p->add_option("src", o->src, "Source (SESSION:/path or local)")->required();
  p->add_option("dst", o->dst, "Destination (SESSION:/path or local)")->required();
  p->callback([o, &exit_code] { exit_code = cp(o->conn, o->src, o->dst); });
}

}  // namespace cela::cli
