// SIGHUP: the config file read again, compared with the one the daemon runs on, top-level
// key by key. What may change live (kLiveKeys) is applied through
// SessionManager::reconfigure; the rest keeps its running value and is named as needing
// a restart. A file that does not load changes nothing.
#pragma once

#include <boost/json/object.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cela::daemon {

// The top-level config keys a reload applies (docs/operations.md "Reload").
inline constexpr std::string_view kLiveKeys[] = {"defaults",        "maxima",           "tenant_quotas",
                                                 "stdin_timeout_s", "output_retention", "logs"};

struct ReloadPlan {
  std::vector<std::string> applied;  // changed keys a reload takes
  std::vector<std::string> restart;  // changed keys that wait for a restart
};

// Keys whose value differs between the two files (present in one only counts).
ReloadPlan plan_reload(const boost::json::object& running, const boost::json::object& next);

// The JSON object of a config file.
Result<boost::json::object> read_config_object(const std::string& path);

// "applied defaults, logs; needs a restart: listen" (or "no change").
std::string describe(const ReloadPlan& plan);

}  // namespace cela::daemon
