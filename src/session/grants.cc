// A session's secret grants: resolved at create, written after boot, expired at their
// TTL, wiped at teardown (session/secret_grants.h). Reactor-only.
#include <algorithm>

#include <boost/asio/steady_timer.hpp>

#include "session/audit_hook.h"
#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;

Result<void> SessionManager::resolve_grants(const Caller& caller, Session& s,
                                            const std::vector<SecretGrantSpec>& grants) {
  assert_on_reactor();
  std::vector<obs::SecretValue> values;
  auto wipe_values = [&] {
    for (auto& v : values) wipe_string(v.value);
  };
  for (const auto& g : grants) {
    auto value = secrets_.open(caller.tenant_id, g.name);
    if (!value) {
      wipe_values();
      return std::unexpected(value.error());
    }
    values.push_back({g.name, value->view()});
    SecretGrant grant;
    grant.spec = g;
    grant.value = std::move(*value);
    s.secrets.push_back(std::move(grant));
  }
  s.redactions = obs::Redactions::build(values);
  wipe_values();
  return {};
}

Result<void> SessionManager::install_grants(const std::shared_ptr<Session>& session) {
  assert_on_reactor();
  Session& s = *session;
  if (s.secrets.empty()) return {};
  if (auto w = write_grant_files(s); !w) return w;
  std::weak_ptr<Session> weak = session;
  for (size_t i = 0; i < s.secrets.size(); ++i) {
    SecretGrant& g = s.secrets[i];
    boost::json::object fields{{"secret", g.spec.name}, {"as", g.spec.as_file ? "file" : "env"},
                               {"ttl_s", g.spec.ttl_s}};
    if (g.spec.as_file) fields["path"] = g.spec.path;
    else fields["env"] = g.spec.env;
    audit_hook("secret.granted", s.record.tenant_id, s.record.id, std::move(fields));
    if (g.spec.ttl_s == 0) continue;
    g.timer = std::make_unique<asio::steady_timer>(reactor_, std::chrono::seconds(g.spec.ttl_s));
    g.timer->async_wait([this, weak, i](boost::system::error_code ec) {
      if (ec) return;
      if (auto sp = weak.lock(); sp && !sp->ended) end_grant(*sp, i, "ttl_expired");
    });
  }
  return {};
}

Result<void> SessionManager::write_grant_files(Session& s) {
  assert_on_reactor();
  if (std::ranges::none_of(s.secrets, [](const SecretGrant& g) { return g.live && g.spec.as_file; })) return {};
  auto root = s.instance->open_root();
  if (!root) return std::unexpected(root.error());
  uid_t uid = s.instance->host_id(s.tmpl.user.uid);
  gid_t gid = s.instance->host_id(s.tmpl.user.gid);
  for (SecretGrant& g : s.secrets) {
    if (!g.live || !g.spec.as_file) continue;
    if (auto w = install_secret_file(root->get(), g.spec.path, g.value.view(), uid, gid); !w)
      return std::unexpected(w.error());
    g.file_written = true;
  }
  return {};
}

bool SessionManager::end_grant(Session& s, size_t index, std::string_view why) {
  assert_on_reactor();
  SecretGrant& g = s.secrets[index];
  if (!g.live) return false;
  g.live = false;
  bool removed = false;
  if (g.file_written && s.instance)
    if (auto root = s.instance->open_root(); root) removed = wipe_secret_file(root->get(), g.spec.path);
  g.value.wipe();
  if (g.timer) g.timer->cancel();
  audit_hook("secret.expired", s.record.tenant_id, s.record.id,
             {{"secret", g.spec.name}, {"reason", why}, {"file_removed", removed}});
  return true;
}

uint64_t SessionManager::end_grants(Session& s, std::string_view why) {
  uint64_t n = 0;
  for (size_t i = 0; i < s.secrets.size(); ++i) n += end_grant(s, i, why);
  return n;
}

}  // namespace cela::session
