// The client subcommands: `cela session create|ls|get|rm` here; `cela exec`, `cela logs`
// (exec_cmd.cc) and `cela cp` (cp_cmd.cc) registered with them.
#include "cli/client_cmds.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>

#include "cli/client_common.h"
#include "cli/cp_cmd.h"
#include "cli/exec_cmd.h"
#include "cli/shell_cmd.h"

namespace cela::cli {
namespace {
namespace json = boost::json;
using client::Client;

// ---- session ----

struct CreateOpts {
  Conn conn;
  std::string template_name;
  int64_t memory_mb = 0, ttl_s = 0;
  double cpus = 0;
  std::vector<std::string> env;
  bool json = false;
};

int session_create(const CreateOpts& o) {
  json::object body, limits, env;
  if (!o.template_name.empty()) body["template"] = o.template_name;
  if (o.memory_mb > 0) limits["memory_mb"] = o.memory_mb;
  if (o.cpus > 0) limits["cpus"] = o.cpus;
  if (o.ttl_s > 0) limits["ttl_s"] = o.ttl_s;
  if (!limits.empty()) body["limits"] = limits;
  std::string bad;
  if (!env_object(o.env, env, bad)) return usage("bad --env '" + bad + "' (want K=V)");
  if (!env.empty()) body["env"] = env;
  auto c = Client::make(o.conn.url, o.conn.key);
  if (!c) return report(c.error());
  auto s = c->json("POST", "/v1/sessions", body);
  if (!s) return report(s.error());
  std::printf("%s\n", o.json ? json::serialize(*s).c_str() : str(*s, "id").c_str());
  return 0;
}

int session_ls(const Conn& conn, bool as_json) {
  auto c = Client::make(conn.url, conn.key);
  if (!c) return report(c.error());
  json::array all;
  std::string cursor;
  do {
    auto page = c->json("GET", "/v1/sessions" + (cursor.empty() ? "" : "?cursor=" + client::url_encode(cursor)));
    if (!page) return report(page.error());
    if (auto* list = page->if_contains("sessions"); list && list->is_array())
      for (auto& s : list->as_array()) all.push_back(s);
    cursor = str(*page, "next_cursor");
  } while (!cursor.empty());
  if (as_json) {
    std::printf("%s\n", json::serialize(all).c_str());
    return 0;
  }
  std::vector<std::array<std::string, 4>> rows{{"ID", "STATE", "TEMPLATE", "CREATED"}};
  for (auto& s : all)
    if (s.is_object())
      rows.push_back({str(s.as_object(), "id"), str(s.as_object(), "state"), str(s.as_object(), "template"),
                      str(s.as_object(), "created_at")});
  std::array<size_t, 4> w{};
  for (auto& r : rows)
    for (size_t i = 0; i < 4; ++i) w[i] = std::max(w[i], r[i].size());
  for (auto& r : rows)
    std::printf("%-*s  %-*s  %-*s  %s\n", static_cast<int>(w[0]), r[0].c_str(), static_cast<int>(w[1]), r[1].c_str(),
                static_cast<int>(w[2]), r[2].c_str(), r[3].c_str());
  return 0;
}

int session_get(const Conn& conn, const std::string& id) {
  auto c = Client::make(conn.url, conn.key);
  if (!c) return report(c.error());
  auto s = c->json("GET", session_path(id));
  if (!s) return report(s.error());
  std::printf("%s\n", json::serialize(*s).c_str());
  return 0;
}

int session_rm(const Conn& conn, const std::string& id) {
  auto c = Client::make(conn.url, conn.key);
  if (!c) return report(c.error());
  auto s = c->json("DELETE", session_path(id));
  if (!s) return report(s.error());
  std::string reason;
  if (auto* t = s->if_contains("termination"); t && t->is_object()) reason = str(t->as_object(), "reason");
  std::printf("%s %s%s\n", str(*s, "id").c_str(), str(*s, "state").c_str(),
              reason.empty() ? "" : (" (" + reason + ")").c_str());
  std::printf("cleanup: %s\n", s->contains("cleanup") ? json::serialize(s->at("cleanup")).c_str() : "{}");
  return 0;
}

}  // namespace

void add_client_commands(CLI::App& app, int& exit_code) {
  auto* session = app.add_subcommand("session", "Manage sessions on a running daemon (create, ls, get, rm)");
  session->require_subcommand(1);

  auto create = std::make_shared<CreateOpts>();
  auto* c = session->add_subcommand("create", "Create a session; prints its id");
  add_conn(c, create->conn);
  c->add_option("--template", create->template_name, "Template to start from (base, host, ...)");
  c->add_option("--memory-mb", create->memory_mb, "Memory limit in MiB");
  c->add_option("--cpus", create->cpus, "CPU ceiling in CPUs");
  c->add_option("--ttl-s", create->ttl_s, "Lifetime in seconds");
  c->add_option("--env", create->env, "Environment variable K=V (repeatable)")->allow_extra_args(false);
  c->add_flag("--json", create->json, "Print the whole session object");
  c->callback([create, &exit_code] { exit_code = session_create(*create); });

  struct Simple {
    Conn conn;
    std::string a, b;
    bool flag = false;
  };
  auto ls = std::make_shared<Simple>();
  auto* l = session->add_subcommand("ls", "List sessions");
  add_conn(l, ls->conn);
  l->add_flag("--json", ls->flag, "Print JSON");
  l->callback([ls, &exit_code] { exit_code = session_ls(ls->conn, ls->flag); });

  auto get = std::make_shared<Simple>();
  auto* g = session->add_subcommand("get", "Print a session (JSON)");
  add_conn(g, get->conn);
  g->add_option("id", get->a, "Session id")->required();
  g->callback([get, &exit_code] { exit_code = session_get(get->conn, get->a); });

  auto rm = std::make_shared<Simple>();
  auto* r = session->add_subcommand("rm", "End a session; prints its final state and cleanup report");
  add_conn(r, rm->conn);
  r->add_option("id", rm->a, "Session id")->required();
  r->callback([rm, &exit_code] { exit_code = session_rm(rm->conn, rm->a); });

  add_exec_commands(app, exit_code);
  add_shell_command(app, exit_code);
  add_cp_command(app, exit_code);
}

}  // namespace cela::cli
