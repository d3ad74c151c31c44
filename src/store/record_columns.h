// How the typed parts of a session record are kept in their JSON columns (limits,
// network, spec, cleanup). This is the storage format, not the API's (api/render.cc):
// the keys match API.md's so SQL can sum limits with json_extract, and a column
// written by an older build reads with defaults for keys it lacked.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"
#include "store/records.h"

namespace cela::store {

std::string limits_column(const SessionLimits& limits);
Result<SessionLimits> read_limits_column(std::string_view text);

std::string network_column(const NetworkPolicy& network);
Result<NetworkPolicy> read_network_column(std::string_view text);

std::string spec_column(const KeptSpec& spec);
Result<KeptSpec> read_spec_column(std::string_view text);

std::string cleanup_column(const CleanupReport& cleanup);
Result<CleanupReport> read_cleanup_column(std::string_view text);

}  // namespace cela::store
