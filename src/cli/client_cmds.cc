#include "cli/client_cmds.h"

#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "client/client.h"

namespace cela::cli {
namespace {
namespace json = boost::json;
using client::Client;

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

struct Conn {
  std::string url, key;
};

void add_conn(CLI::App* cmd, Conn& c) {
  cmd->add_option("--url", c.url, "Daemon URL: unix:///path.sock or http://host:port (default: $CELA_URL, else unix:///run/cela/cela.sock)");
  cmd->add_option("--api-key", c.key, "API key for TCP (default: $CELA_API_KEY)");
}

int report(const Error& e) {
  std::fprintf(stderr, "cela: %s\n", e.message().c_str());
  return kExitError;
}

int usage(const std::string& msg) {
  std::fprintf(stderr, "cela: %s (see --help)\n", msg.c_str());
  return kExitUsage;
}

std::string str(const json::object& o, std::string_view key) {
  auto* v = o.if_contains(key);
  if (!v || v->is_null()) return "";
  if (v->is_string()) return std::string(v->as_string());
  return json::serialize(*v);
}

// "K=V" pairs into an object; false on a malformed one.
bool env_object(const std::vector<std::string>& pairs, json::object& out, std::string& bad) {
  for (auto& p : pairs) {
    auto eq = p.find('=');
    if (eq == std::string::npos || eq == 0) {
      bad = p;
      return false;
    }
    out[p.substr(0, eq)] = p.substr(eq + 1);
  }
  return true;
}

std::string session_path(const std::string& id) { return "/v1/sessions/" + client::url_encode(id); }

void write_all(FILE* f, std::string_view data) {
  std::fwrite(data.data(), 1, data.size(), f);
  std::fflush(f);
}

// Streams an exec's output to our stdout/stderr until its `exit` event, reconnecting
// with Last-Event-ID when the stream drops. Returns the final exec record.
Result<json::object> stream_exec(const Client& c, const std::string& sid, const std::string& eid) {
  std::string target = session_path(sid) + "/execs/" + client::url_encode(eid) + "/output?follow=1";
  std::string last_id;
  std::optional<json::object> record;
  std::optional<Error> bad;
  int attempts = 0;
  for (;;) {
    std::string before = last_id;
    auto r = c.follow(target, last_id, [&](const client::SseEvent& ev) {
      if (ev.event == "stdout" || ev.event == "stderr") {
        auto bytes = client::base64_decode(ev.data);
        if (!bytes) {
          bad = bytes.error();
          return false;
        }
        write_all(ev.event == "stdout" ? stdout : stderr, *bytes);
      } else if (ev.event == "exit") {
        boost::system::error_code ec;
        json::value v = json::parse(ev.data, ec);
        if (ec || !v.is_object()) {
          bad = Error{ErrorCode::internal, 0, "bad exit event from the server"};
          return false;
        }
        record = std::move(v.as_object());
        return false;
      }
      return true;
    });
    if (record) return std::move(*record);
    if (bad) return std::unexpected(*bad);
    // An answer from the server (exec or session unknown, session gone): final.
    if (!r && r.error().code != ErrorCode::system) return std::unexpected(r.error());
    if (last_id != before) attempts = 0;
    if (++attempts > 8) {
      if (!r) return std::unexpected(r.error());
      return fail(ErrorCode::system, "the output stream of exec " + eid + " ended before the exec did");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempts));
  }
}

// The CLI exit code for a finished exec record (as `cela run`).
int exit_code_of(const json::object& rec) {
  std::string state = str(rec, "state");
  if (state == "timed_out") return 124;
  if (state == "oom_killed") return 121;
  if (state == "failed") return 125;
  if (auto* s = rec.if_contains("signal"); s && s->is_int64()) return 128 + static_cast<int>(s->as_int64());
  if (auto* e = rec.if_contains("exit_code"); e && e->is_int64()) return static_cast<int>(e->as_int64());
  return 125;
}

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

// ---- exec, logs ----

struct ExecOpts {
  Conn conn;
  std::string session, cwd, user;
  std::vector<std::string> env, command;
  int64_t timeout_s = 0;
  bool detach = false;
};

int exec(const ExecOpts& o) {
  if (o.command.empty()) return usage("exec needs a command after --");
  json::object body, env;
  json::array argv;
  for (auto& a : o.command) argv.emplace_back(a);
  body["argv"] = argv;
  if (!o.cwd.empty()) body["cwd"] = o.cwd;
  if (!o.user.empty()) body["user"] = o.user;
  if (o.timeout_s > 0) body["timeout_s"] = o.timeout_s;
  std::string bad;
  if (!env_object(o.env, env, bad)) return usage("bad --env '" + bad + "' (want K=V)");
  if (!env.empty()) body["env"] = env;
  auto c = Client::make(o.conn.url, o.conn.key);
  if (!c) return report(c.error());
  auto started = c->json("POST", session_path(o.session) + "/execs", body);
  if (!started) return report(started.error());
  if (o.detach) {
    std::printf("%s\n", str(*started, "id").c_str());
    return 0;
  }
  auto rec = stream_exec(*c, o.session, str(*started, "id"));
  if (!rec) return report(rec.error());
  std::string state = str(*rec, "state");
  if (state != "exited") {
    std::string reason = str(*rec, "reason");
    std::fprintf(stderr, "cela: exec %s%s\n", state.c_str(), reason.empty() ? "" : (": " + reason).c_str());
  }
  return exit_code_of(*rec);
}

int logs(const Conn& conn, const std::string& sid, const std::string& eid, bool follow) {
  auto c = Client::make(conn.url, conn.key);
  if (!c) return report(c.error());
  if (follow) {
    auto rec = stream_exec(*c, sid, eid);
    return rec ? 0 : report(rec.error());
  }
  auto out = c->json("GET", session_path(sid) + "/execs/" + client::url_encode(eid) + "/output");
  if (!out) return report(out.error());
  bool b64 = str(*out, "encoding") == "base64";
  for (auto [name, f] : {std::pair{"stdout", stdout}, std::pair{"stderr", stderr}}) {
    std::string data = str(*out, name);
    if (b64) {
      auto d = client::base64_decode(data);
      if (!d) return report(d.error());
      data = std::move(*d);
    }
    write_all(f, data);
  }
  return 0;
}

// ---- cp ----

// "SESSION:/path" → {session, path}; a local path otherwise.
std::optional<std::pair<std::string, std::string>> remote_of(const std::string& arg) {
  auto colon = arg.find(':');
  if (colon == std::string::npos || colon == 0 || arg.substr(0, colon).find('/') != std::string::npos)
    return std::nullopt;
  return std::pair{arg.substr(0, colon), arg.substr(colon + 1)};
}

int cp(const Conn& conn, const std::string& src, const std::string& dst) {
  auto rs = remote_of(src), rd = remote_of(dst);
  if (bool(rs) == bool(rd)) return usage("cp needs exactly one side as SESSION:/path and the other a local path");
  auto c = Client::make(conn.url, conn.key);
  if (!c) return report(c.error());
  if (rd) {  // upload
    std::ifstream in(src, std::ios::binary);
    if (!in) return report(Error{ErrorCode::not_found, errno, "open " + src});
    std::ostringstream data;
    data << in.rdbuf();
    auto r = c->request("PUT", session_path(rd->first) + "/files?path=" + client::url_encode(rd->second), data.str(),
                        {{"Content-Type", "application/octet-stream"}});
    if (!r) return report(r.error());
    return 0;
  }
  auto r = c->request("GET", session_path(rs->first) + "/files?path=" + client::url_encode(rs->second));
  if (!r) return report(r.error());
  std::string target = dst;
  struct stat st {};
  if (::stat(dst.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    auto slash = rs->second.rfind('/');
    target += "/" + (slash == std::string::npos ? rs->second : rs->second.substr(slash + 1));
  }
  std::ofstream out(target, std::ios::binary | std::ios::trunc);
  if (!out) return report(Error{ErrorCode::system, errno, "open " + target});
  out.write(r->body.data(), static_cast<std::streamsize>(r->body.size()));
  out.close();
  if (!out) return report(Error{ErrorCode::system, errno, "write " + target});
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

  auto ex = std::make_shared<ExecOpts>();
  auto* e = app.add_subcommand("exec", "Run a command in a session, streaming its output; exits with its code");
  add_conn(e, ex->conn);
  e->add_option("session", ex->session, "Session id")->required();
  e->add_option("--cwd", ex->cwd, "Working directory inside");
  e->add_option("--env", ex->env, "Environment variable K=V (repeatable)")->allow_extra_args(false);
  e->add_option("--user", ex->user, "Run as `user` or `root`")->check(CLI::IsMember({"user", "root"}));
  e->add_option("--timeout-s", ex->timeout_s, "Wall-clock timeout in seconds");
  e->add_flag("--detach,-d", ex->detach, "Print the exec id and return at once (see `cela logs`)");
  e->add_option("command", ex->command, "CMD [ARGS...] after --")->expected(-1)->required();
  e->footer("Exit code: the command's own; 128+N when killed by signal N; 124 timed out; 121 memory limit (OOM); "
            "125 sandbox failure; 1 client or API error; 2 bad usage.");
  e->callback([ex, &exit_code] { exit_code = exec(*ex); });

  auto lg = std::make_shared<Simple>();
  auto* g2 = app.add_subcommand("logs", "Print an exec's captured output (or follow it)");
  add_conn(g2, lg->conn);
  g2->add_option("session", lg->a, "Session id")->required();
  g2->add_option("exec", lg->b, "Exec id")->required();
  g2->add_flag("--follow,-f", lg->flag, "Stream the output until the exec ends");
  g2->callback([lg, &exit_code] { exit_code = logs(lg->conn, lg->a, lg->b, lg->flag); });

  auto cpo = std::make_shared<Simple>();
  auto* p = app.add_subcommand("cp", "Copy one file: SESSION:/path <-> local path");
  add_conn(p, cpo->conn);
  p->add_option("src", cpo->a, "Source (SESSION:/path or local)")->required();
  p->add_option("dst", cpo->b, "Destination (SESSION:/path or local)")->required();
  p->callback([cpo, &exit_code] { exit_code = cp(cpo->conn, cpo->a, cpo->b); });
}

}  // namespace cela::cli
