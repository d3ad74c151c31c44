// File policy (API.md "File policy"): parsing the `files` object of a create request
// or of the daemon config, and narrowing a request against the tenant defaults.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/json_fields.h"
#include "session/types.h"

namespace cela::session {

// `files` over `base`. narrow: every writable/exportable pattern must lie at or below
// one of base's and sizes may only shrink (a session may narrow, never widen:
// policy_denied otherwise). Patterns: absolute "DIR/**" (a whole tree; "/**" is all).
Result<FilePolicy> parse_file_policy(const JsonFields& files, const FilePolicy& base, bool narrow);

// "DIR/**" -> "DIR" ("/**" -> "/"): the roots SessionFs checks against.
std::vector<std::string> policy_roots(const std::vector<std::string>& patterns);

std::string_view to_string(SecretScan scan);

}  // namespace cela::session
