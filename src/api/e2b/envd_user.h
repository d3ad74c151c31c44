// Which sandbox user an envd call acts as, and how envd reads its paths.
//
// The user: `username` in the query (/files) or `Authorization: Basic base64("name:")`
// (the Connect RPCs); absent, `user` (envd >= 0.4.0's default). "root" is the sandbox's
// root, "user" its template user; any other name is unauthorized, as envd answers for
// an unknown account.
//
// Paths, as envd reads them: "~" and "~/x" are the user's home; a relative path is
// relative to the home and lexically cleaned ("a/../b" is "<home>/b"); an absolute path
// is taken as given (the session layer resolves it inside the sandbox root, where ".."
// and symlinks can never leave it).
#pragma once

#include <string>
#include <string_view>

#include "api/http_error.h"
#include "api/request.h"
#include "session/types.h"

namespace cela::api::e2b {

ApiResult<session::ExecUser> envd_user_from_query(const Request& req);
ApiResult<session::ExecUser> envd_user_from_auth(const Request& req);

// invalid_request for "~name" forms and NUL bytes.
ApiResult<std::string> envd_path(std::string_view path, std::string_view home);

}  // namespace cela::api::e2b
