#include "api/e2b/envd_user.h"

#include <vector>

#include "common/encoding.h"
#include "common/fs.h"

namespace cela::api::e2b {

namespace {

ApiResult<session::ExecUser> named(std::string_view name) {
  if (name.empty() || name == "user") return session::ExecUser::user;
  if (name == "root") return session::ExecUser::root;
  return api_fail(ApiError::unauthorized("no user `" + std::string(name) + "` in the sandbox (use `user` or `root`)"));
}

}  // namespace

ApiResult<session::ExecUser> envd_user_from_query(const Request& req) {
  auto name = req.query_value("username");
  return named(name ? *name : std::string_view());
}

ApiResult<session::ExecUser> envd_user_from_auth(const Request& req) {
  auto auth = req.header("Authorization");
  if (!auth) return session::ExecUser::user;
  std::string_view v = *auth;
  if (v.size() < 6 || (v.substr(0, 6) != "Basic " && v.substr(0, 6) != "basic "))
    return api_fail(ApiError::unauthorized("Authorization must be Basic <base64 user:>"));
  auto decoded = base64_decode(v.substr(6));
  if (!decoded) return api_fail(ApiError::unauthorized("Authorization must be Basic <base64 user:>"));
  return named(std::string_view(*decoded).substr(0, decoded->find(':')));
}

ApiResult<std::string> envd_path(std::string_view path, std::string_view home) {
  if (path.find('\0') != std::string_view::npos) return api_fail(ApiError::invalid_request("a path holds a NUL byte"));
  if (!path.empty() && path[0] == '~') {
    if (path.size() > 1 && path[1] != '/')
      return api_fail(ApiError::invalid_request("cannot expand another user's home: " + std::string(path)));
    path.remove_prefix(1);
    while (!path.empty() && path[0] == '/') path.remove_prefix(1);
  } else if (!path.empty() && path[0] == '/') {
    return std::string(path);
  }
  // Relative to the home, cleaned as a path join does.
  std::vector<std::string_view> parts;
  auto push = [&](std::string_view p) {
    for (std::string_view c : path_components(p)) {
      if (c != "..") parts.push_back(c);
      else if (!parts.empty()) parts.pop_back();
    }
  };
  push(home);
  push(path);
  std::string out;
  for (auto p : parts) out += "/" + std::string(p);
  return out.empty() ? std::string("/") : out;
}

}  // namespace cela::api::e2b
