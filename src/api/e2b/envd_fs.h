// envd's filesystem.Filesystem service (envd_fs.cc) and its EntryInfo.
#pragma once

#include <boost/json/object.hpp>
#include <cstdint>
#include <string>

#include "api/e2b/e2b.h"
#include "session/session_fs.h"

namespace cela::api::e2b {

// Go's os.FileMode.String() of a file of `format` (st_mode & S_IFMT) with permission
// and special bits `mode` ("-rw-r--r--", "drwxr-xr-x", "Lrwxrwxrwx", "dtrwxrwxrwx").
std::string go_permissions(uint32_t format, uint32_t mode);
// A protobuf Timestamp in JSON: RFC 3339, UTC, milliseconds ("2026-12-01T21:30:00.123Z").
std::string rfc3339_ms(int64_t ms);
// filesystem.EntryInfo of `info` as the view `fs` sees it.
boost::json::object entry_json(session::SessionFs& fs, const session::FileInfo& info);

void add_envd_fs_routes(E2bContext& ctx);

}  // namespace cela::api::e2b
