// SessionManager's egress steps (manager.h "Egress"): the proxy, each session's door
// and policy, live policy changes, the records.
#include <cstdio>

#include "common/fs.h"
#include "obs/audit.h"
#include "obs/catalog.h"
#include "session/manager.h"
#include "session/session_fs.h"
#include "session/state.h"

namespace cela::session {

Result<void> SessionManager::open_egress() {
  if (!config_.egress.ca_file.empty()) {
    auto pem = read_file(config_.egress.ca_file);
    if (!pem) return fail(ErrorCode::invalid_argument, "egress.ca_file: " + pem.error().message());
    if (pem->find("-----BEGIN CERTIFICATE-----") == std::string::npos)
      return fail(ErrorCode::invalid_argument, "egress.ca_file " + config_.egress.ca_file + " holds no PEM certificate");
    egress_ca_pem_ = std::move(*pem);
  }
  std::vector<std::string> own;
  if (!config_.listen.empty()) own.push_back(config_.listen);
  // Limits the proxy hits become the session's limit events (reactor-only state).
  egress_recorder_ = std::make_unique<EgressRecorder>(
      store_, [this](const std::string& id, const std::string& tenant, const std::string& kind, const std::string& detail) {
        on_reactor([this, id, tenant, kind, detail] {
          if (auto it = sessions_.find(id); it != sessions_.end() && !it->second->ended)
            return limit_event(*it->second, kind, detail, "");
          // A summary sent as the door closed reaches an ended session: the audit
          // (where an ended session's limit events are read from) still gets it.
          if (!tenant.empty()) {
            obs::catalog::limit_events().add({tenant, kind});
            obs::audit("limit." + kind, {tenant, id, ""}, {{"kind", kind}, {"detail", detail}});
          }
        });
      });
  auto proxy = net::EgressProxy::start(config_.egress, own, egress_recorder_.get());
  if (!proxy) return std::unexpected(proxy.error());
  egress_ = std::move(*proxy);
  return {};
}

Result<void> SessionManager::egress_for(const Caller& caller, const CreateSessionSpec& spec, Session& session) {
  session.door = spec.network.mode == "allowlist" || spec.egress_door;
  if (!session.door) return {};
  auto ceiling = store_.network_ceiling(caller.tenant_id);
  if (!ceiling) return std::unexpected(ceiling.error());
  auto policy = egress_policy(spec.network, *ceiling);
  if (!policy) return std::unexpected(policy.error());
  session.egress = std::move(*policy);
  return {};
}

Result<void> SessionManager::open_session_door(Session& session) {
  assert_on_reactor();
  if (!session.door) return {};
  if (!egress_ca_pem_.empty()) {
    // The operator's extra CA joins the session's trust store (the template's bundle
    // with it appended) and has a file of its own; both written as root inside.
    auto root = session.instance->open_root();
    if (!root) return std::unexpected(root.error());
    SessionFs fs(std::move(*root), session.instance->host_id(0), session.instance->host_id(0), fs_limits());
    std::string bundle;
    if (auto existing = fs.read_file(kSessionCaBundle); existing) bundle = std::move(*existing);
    if (!bundle.empty() && bundle.back() != '\n') bundle += '\n';
    bundle += egress_ca_pem_;
    if (auto w = fs.write_file(kSessionExtraCa, egress_ca_pem_, {.mode = 0644, .make_parents = true, .xattrs = {}}); !w)
      return std::unexpected(w.error());
    if (auto w = fs.write_file(kSessionCaBundle, bundle, {.mode = 0644, .make_parents = true, .xattrs = {}}); !w)
      return std::unexpected(w.error());
  }
  return egress_->open_door(session.record.id, session.record.tenant_id, session.instance->take_door(),
                            session.egress);
}

Result<void> SessionManager::patch_network(Session& session, const PatchSpec& spec) {
  assert_on_reactor();
  if (!session.door || session.record.network.mode != "allowlist")
    return fail(ErrorCode::conflict, "session " + session.record.id +
                                         " was created without network (mode none): its allowlist cannot change");
  store::NetworkPolicy next = session.record.network;
  if (spec.network_allow) next.allow = *spec.network_allow;
  if (spec.network_deny) next.deny = *spec.network_deny;
  auto ceiling = store_.network_ceiling(session.record.tenant_id);
  if (!ceiling) return std::unexpected(ceiling.error());
  auto policy = egress_policy(next, *ceiling);
  if (!policy) return std::unexpected(policy.error());
  SessionRecord rec = session.record;
  rec.network = next;
  if (auto u = store_.update_session(rec); !u) return std::unexpected(u.error());
  session.record = std::move(rec);
  session.egress = *policy;
  egress_->set_policy(session.record.id, std::move(*policy));
  return {};
}

Result<std::optional<store::NetworkCeiling>> SessionManager::network_ceiling(const std::string& tenant_id) {
  return store_.network_ceiling(tenant_id);
}

Result<void> SessionManager::set_network_ceiling(const std::string& tenant_id,
                                                 const std::optional<store::NetworkCeiling>& ceiling) {
  std::optional<net::RuleSet> rules;
  if (ceiling) {
    auto parsed = net::parse_rules(ceiling->allow, ceiling->deny);
    if (!parsed) return std::unexpected(parsed.error());
    rules = std::move(*parsed);
  }
  if (auto w = store_.set_network_ceiling(tenant_id, ceiling); !w) return w;
  on_reactor([this, tenant_id, rules = std::move(rules)] {
    for (auto& [id, s] : sessions_) {
      if (!s->door || s->record.tenant_id != tenant_id) continue;
      s->egress.ceiling = rules;
      egress_->set_policy(id, s->egress);
    }
  });
  return {};
}

Result<std::pair<std::vector<store::EgressRecord>, std::string>> SessionManager::egress_records(
    const Caller& caller, const std::string& session_id, const store::PageRequest& page) {
  if (auto s = get(caller, session_id); !s) return std::unexpected(s.error());
  return store_.list_egress(session_id, page);
}

}  // namespace cela::session
