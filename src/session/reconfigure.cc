// SIGHUP's session side: the settings that may change while sessions run. Each is read
// on the reactor (config_) or by request threads from the published snapshot, so a
// change here applies to what starts after it: sessions and execs that exist keep the
// limits they were given.
#include "obs/log.h"
#include "session/manager.h"

namespace cela::session {

void SessionManager::reconfigure(const DaemonConfig& next, Done<void> done) {
  on_reactor([this, next, done = std::move(done)] {
    config_.defaults = next.defaults;
    config_.maxima = next.maxima;
    config_.quotas = next.quotas;
    config_.stdin_timeout_s = next.stdin_timeout_s;
    bool sweep_was_off = config_.output_retention_days <= 0;
    config_.output_retention_days = next.output_retention_days;
    if (sweep_was_off) arm_retention();  // it stops re-arming itself while 0
    config_.json_logs = next.json_logs;
    config_.log_level = next.log_level;
    obs::json_logs(next.json_logs);
    if (auto level = obs::parse_level(next.log_level)) obs::log_level(*level);
    published_.store(std::make_shared<const DaemonConfig>(config_));
    done({});
  });
}

}  // namespace cela::session
