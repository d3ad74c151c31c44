// envd's /files routes (envd_files.cc) and what the Filesystem RPCs share with them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/e2b/e2b.h"
#include "api/responder.h"
#include "session/session_fs.h"
#include "session/types.h"

namespace cela::api::e2b {

// File metadata (envd 0.6.2): an upload's `X-Metadata-<key>: value` headers become
// extended attributes `user.e2b.<key>` (key lower-cased) of the written file; entries
// report them back as `metadata`.
inline constexpr std::string_view kMetadataHeader = "X-Metadata-";
inline constexpr std::string_view kMetadataXattr = "user.e2b.";
std::vector<std::pair<std::string, std::string>> metadata_xattrs(const Request& req);

// The session's view for the sandbox user `as` (blocking pool: it waits for the
// reactor). A sandbox that is not, or no longer, live is answered with E2B's 502
// (sandbox_lookup.h), any other failure with the route's error: null then.
std::shared_ptr<session::SessionFs> view_or_answer(E2bContext& ctx, Responder& r, session::ExecUser as);

void add_envd_files_routes(E2bContext& ctx);

}  // namespace cela::api::e2b
