#include "cli/cp_cmd.h"

#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/client_common.h"
#include "cli/local_tar.h"

namespace cela::cli {
namespace {
namespace json = boost::json;
using client::Client;

// What a path names: nothing, a directory, or something else (a file, a link...).
enum class Kind { missing, dir, other };

// ---- path rules (pure) ----

bool ends_with_slash(const std::string& p) {
  return p.size() > 1 && p.back() == '/';
}

// "DIR/." (or "."): the directory's contents, not the directory itself.
bool names_contents(const std::string& p) {
  return p == "." || p.ends_with("/.");
}

// The last component, trailing slashes ignored ("a/b/" → "b").
std::string last_component(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir + (dir.ends_with('/') ? "" : "/") + name;
}

// Where a copy of `src` lands, given what `dst` is. The rules of `cp -r` and
// `docker cp`:
//   file SRC: DST a directory → DST/<name of SRC>; DST ending in '/' must be an
//     existing directory; otherwise DST is the file (created or replaced).
//   directory SRC: DST missing → DST is created and gets SRC's contents; DST a
//     directory → SRC is copied into it as DST/<name of SRC> (merged if it exists),
//     or, when SRC ends in "/.", SRC's contents go straight into DST; DST a file → error.
Result<std::string> destination(bool src_is_dir, const std::string& src, const std::string& dst,
                                Kind dst_kind) {
  if (src_is_dir) {
    if (dst_kind == Kind::other)
      return fail(ErrorCode::invalid_argument, "cannot copy a directory onto the file " + dst);
    if (dst_kind == Kind::missing || names_contents(src) || last_component(src) == "/") return dst;
    return join(dst, last_component(src));
  }
  if (ends_with_slash(src)) return fail(ErrorCode::invalid_argument, src + " is not a directory");
  if (dst_kind == Kind::dir) return join(dst, last_component(src));
  if (ends_with_slash(dst))
    return fail(ErrorCode::not_found,
                dst_kind == Kind::missing ? "no directory " + dst : dst + " is not a directory");
  return dst;
}

// ---- the two sides ----

Kind local_kind(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Kind::missing;
  return S_ISDIR(st.st_mode) ? Kind::dir : Kind::other;
}

std::string files_target(const std::string& sid, const std::string& path) {
  return session_path(sid) + "/files?path=" + client::url_encode(path);
}

// HEAD …/files: the daemon does not follow a symlink at the end of the path, so a link
// is asked again with a trailing '/' (which resolves it) to learn whether it is a dir.
Result<Kind> remote_kind(const Client& c, const std::string& sid, const std::string& path) {
  auto r = c.request("HEAD", files_target(sid, path));
  if (!r) {
    if (r.error().code == ErrorCode::not_found) return Kind::missing;
    return std::unexpected(r.error());
  }
  std::string type = r->header("X-Cela-Type");
  if (type == "dir") return Kind::dir;
  if (type == "symlink" && !path.ends_with('/')) {
    auto through = remote_kind(c, sid, path + "/");
    if (through && *through == Kind::dir) return Kind::dir;
  }
  return Kind::other;
}

Result<void> remote_mkdir(const Client& c, const std::string& sid, const std::string& path) {
  auto r = c.json("POST", session_path(sid) + "/fs/mkdir",
                  json::object{{"path", path}, {"parents", false}});
  if (!r) return std::unexpected(r.error());
  return {};
}

Result<std::string> read_local(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return sys_fail("open " + path);
  std::ostringstream data;
  data << in.rdbuf();
  if (in.bad()) return sys_fail("read " + path);
  return data.str();
}

Result<void> write_local(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return sys_fail("open " + path);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) return sys_fail("write " + path);
  return {};
}

// A directory copy needs its destination directory: made when missing, merged into
// when it is one, refused when it is something else.
template <class KindOf, class MakeDir>
Result<void> ensure_dir(const std::string& path, KindOf kind_of, MakeDir make_dir) {
  auto kind = kind_of(path);
  if (!kind) return std::unexpected(kind.error());
  if (*kind == Kind::dir) return {};
  if (*kind == Kind::other)
    return fail(ErrorCode::invalid_argument, "cannot copy a directory onto the file " + path);
  return make_dir(path);
}

Result<void> download(const Client& c, const std::string& sid, const std::string& src,
                      const std::string& dst) {
  auto kind = remote_kind(c, sid, src);
  if (!kind) return std::unexpected(kind.error());
  if (*kind == Kind::missing)
    return fail(ErrorCode::not_found, "no such file or directory: " + sid + ":" + src);
  auto target = destination(*kind == Kind::dir, src, dst, local_kind(dst));
  if (!target) return std::unexpected(target.error());
  if (*kind != Kind::dir) {
    auto r = c.request("GET", files_target(sid, src));
    if (!r) return std::unexpected(r.error());
    return write_local(*target, r->body);
  }
  auto made = ensure_dir(
      *target, [](const std::string& p) -> Result<Kind> { return local_kind(p); },
      [](const std::string& p) -> Result<void> {
        if (::mkdir(p.c_str(), 0755) != 0) return sys_fail("mkdir " + p);
        return {};
      });
  if (!made) return made;
  auto tar = c.request("GET", session_path(sid) + "/archive?path=" + client::url_encode(src));
  if (!tar) return std::unexpected(tar.error());
  auto n = unpack_into(*target, tar->body);
  if (!n) return std::unexpected(n.error());
  return {};
}

Result<void> upload(const Client& c, const std::string& src, const std::string& sid,
                    const std::string& dst) {
  Kind kind = local_kind(src);
  if (kind == Kind::missing) return sys_fail("stat " + src, ENOENT);
  auto dst_kind = remote_kind(c, sid, dst);
  if (!dst_kind) return std::unexpected(dst_kind.error());
  auto target = destination(kind == Kind::dir, src, dst, *dst_kind);
  if (!target) return std::unexpected(target.error());
  if (kind != Kind::dir) {
    auto data = read_local(src);
    if (!data) return std::unexpected(data.error());
    auto r = c.request("PUT", files_target(sid, *target), *data,
                       {{"Content-Type", "application/octet-stream"}});
    if (!r) return std::unexpected(r.error());
    return {};
  }
  auto tar = pack_directory(src);
  if (!tar) return std::unexpected(tar.error());
  auto made = ensure_dir(
      *target, [&](const std::string& p) { return remote_kind(c, sid, p); },
      [&](const std::string& p) { return remote_mkdir(c, sid, p); });
  if (!made) return made;
  auto r = c.request("PUT", session_path(sid) + "/archive?path=" + client::url_encode(*target),
                     *tar, {{"Content-Type", "application/x-tar"}});
  if (!r) return std::unexpected(r.error());
  return {};
}

// "SESSION:/path" → {session, path}; a local path otherwise (a '/' before the colon
// makes it local: "./a:b").
std::optional<std::pair<std::string, std::string>> remote_of(const std::string& arg) {
  auto colon = arg.find(':');
  if (colon == std::string::npos || colon == 0 ||
      arg.substr(0, colon).find('/') != std::string::npos)
    return std::nullopt;
  return std::pair{arg.substr(0, colon), arg.substr(colon + 1)};
}

int cp(const Conn& conn, const std::string& src, const std::string& dst) {
  auto rs = remote_of(src), rd = remote_of(dst);
  if (bool(rs) == bool(rd))
    return usage("cp needs exactly one side as SESSION:/path and the other a local path");
  if ((rs && rs->second.empty()) || (rd && rd->second.empty()))
    return usage("cp needs a path after SESSION:");
  auto c = Client::make(conn.url, conn.key);
  if (!c) return report(c.error());
  auto r = rd ? upload(*c, src, rd->first, rd->second) : download(*c, rs->first, rs->second, dst);
  return r ? 0 : report(r.error());
}

}  // namespace

void add_cp_command(CLI::App& app, int& exit_code) {
  struct CpOpts {
    Conn conn;
    std::string src, dst;
  };
  auto o = std::make_shared<CpOpts>();
  auto* p =
      app.add_subcommand("cp", "Copy a file or a directory tree: SESSION:/path <-> local path");
  add_conn(p, o->conn);
  p->add_option("src", o->src, "Source (SESSION:/path or local)")->required();
  p->add_option("dst", o->dst, "Destination (SESSION:/path or local)")->required();
  p->footer(
      "A directory is copied whole. DST missing: created, with SRC's contents. DST an existing "
      "directory: SRC goes "
      "into it as DST/NAME, or only its contents when SRC ends in /. (as cp -r and docker cp). A "
      "file SRC into "
      "DST ending in / needs that directory to exist. Exit code: 0 done; 1 client or API error; 2 "
      "bad usage.");
  p->callback([o, &exit_code] { exit_code = cp(o->conn, o->src, o->dst); });
}

}  // namespace cela::cli
