#include "cli/key_cmd.h"

#include <memory>

#include "cli/client_common.h"

namespace cela::cli {
namespace {
namespace json = boost::json;

struct KeyOpts {
  Conn conn;
  std::string tenant;  // name or id; "" = the only tenant the caller sees, else `default`
  bool admin = false, e2b = false, json = false;
};

// The id of the tenant `want` names (by name or id), as GET /v1/tenants shows them.
Result<std::string> tenant_id(const client::Client& c, const std::string& want) {
  auto listed = c.json("GET", "/v1/tenants");
  if (!listed) return std::unexpected(listed.error());
  const auto* tenants = listed->if_contains("tenants");
  if (!tenants || !tenants->is_array()) return fail(ErrorCode::internal, "the daemon's tenant list has no `tenants`");
  const auto& all = tenants->as_array();
  for (const auto& t : all) {
    if (!t.is_object()) continue;
    const auto& o = t.as_object();
    if (want.empty() ? (all.size() == 1 || str(o, "name") == "default") : (str(o, "name") == want || str(o, "id") == want))
      return str(o, "id");
  }
  if (want.empty()) return fail(ErrorCode::invalid_argument, "several tenants and none named default: give --tenant");
  return fail(ErrorCode::not_found, "no tenant " + want);
}

int key_create(const KeyOpts& o) {
  auto c = client::Client::make(o.conn.url, o.conn.key);
  if (!c) return report(c.error());
  auto id = tenant_id(*c, o.tenant);
  if (!id) return report(id.error());
  json::object body{{"admin", o.admin}};
  if (o.e2b) body["e2b"] = true;
  auto key = c->json("POST", "/v1/tenants/" + client::url_encode(*id) + "/keys", body);
  if (!key) return report(key.error());
  std::printf("%s\n", o.json ? json::serialize(*key).c_str() : str(*key, "key").c_str());
  return 0;
}

}  // namespace

void add_key_commands(CLI::App& app, int& exit_code) {
  auto* key = app.add_subcommand("key", "API keys of a tenant on a running daemon");
  key->require_subcommand(1);
  auto o = std::make_shared<KeyOpts>();
  auto* create = key->add_subcommand("create", "Issue a key; prints it (shown once: only its hash is kept)");
  add_conn(create, o->conn);
  create->add_option("--tenant", o->tenant, "Tenant name or id (default: the only one you see, else `default`)");
  create->add_flag("--admin", o->admin, "An admin key of that tenant (manages its keys)");
  create->add_flag("--e2b", o->e2b, "Spell it e2b_<hex>, as E2B's SDKs expect in E2B_API_KEY");
  create->add_flag("--json", o->json, "Print the whole answer {id, tenant_id, key, admin, host_admin}");
  create->callback([o, &exit_code] { exit_code = key_create(*o); });
}

}  // namespace cela::cli
