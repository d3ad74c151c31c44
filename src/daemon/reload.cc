#include "daemon/reload.h"

#include <algorithm>
#include <boost/json/parse.hpp>
#include <set>

#include "common/fs.h"

namespace cela::daemon {

ReloadPlan plan_reload(const boost::json::object& running, const boost::json::object& next) {
  std::set<std::string> keys;
  for (const auto& kv : running) keys.emplace(kv.key());
  for (const auto& kv : next) keys.emplace(kv.key());
  ReloadPlan plan;
  for (const auto& key : keys) {
    const boost::json::value* a = running.if_contains(key);
    const boost::json::value* b = next.if_contains(key);
    if (a && b && *a == *b) continue;
    bool live = std::find(std::begin(kLiveKeys), std::end(kLiveKeys), key) != std::end(kLiveKeys);
    (live ? plan.applied : plan.restart).push_back(key);
  }
  return plan;
}

Result<boost::json::object> read_config_object(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(*text, ec);
  if (ec) return fail(ErrorCode::invalid_argument, "config " + path + ": " + ec.message());
  if (!v.is_object()) return fail(ErrorCode::invalid_argument, "config " + path + ": not a JSON object");
  return std::move(v.as_object());
}

std::string describe(const ReloadPlan& plan) {
  auto join = [](const std::vector<std::string>& keys) {
    std::string out;
    for (const auto& k : keys) out += (out.empty() ? "" : ", ") + k;
    return out;
  };
  if (plan.applied.empty() && plan.restart.empty()) return "no change";
  std::string out;
  if (!plan.applied.empty()) out = "applied " + join(plan.applied);
  if (!plan.restart.empty()) out += (out.empty() ? "" : "; ") + std::string("needs a restart (kept as running): ") + join(plan.restart);
  return out;
}

}  // namespace cela::daemon
