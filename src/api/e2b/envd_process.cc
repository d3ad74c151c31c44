// envd's process.Process service (docs/e2b.md "Data plane: Connect and processes"), a
// translation onto the session layer's execs:
//
//   Start       start_exec + follow_exec from the first byte   (server stream)
//   Connect     follow_exec of a running exec from where it is (server stream)
//   List        live_execs
//   SendInput   write_stdin          CloseStdin  write_stdin(close)
//   SendSignal  kill_exec            Update      resize_exec (PTY size)
//
// E2B names a process by its pid inside the sandbox (or by its tag): the exec record
// has that pid, so a selector becomes an exec id through live_execs. The stream's
// events are process.ProcessEvent in proto3 JSON: start{pid} once, data{stdout |
// stderr | pty} (base64), end{exitCode, exited, status, error}, keepalive{}.
//
// A sandbox that ends under an open stream drops it without an end event (the SDK then
// probes /health and reports the sandbox gone).
#include <signal.h>
#include <string.h>

#include <boost/json.hpp>
#include <memory>
#include <mutex>

#include "api/e2b/connect.h"
#include "api/e2b/e2b.h"
#include "api/e2b/sandbox_lookup.h"
#include "api/responder.h"
#include "common/encoding.h"

namespace cela::api::e2b {
namespace json = boost::json;
using session::Caller;
using session::SessionManager;

namespace {

constexpr std::string_view kService = "/49983/process.Process/";

json::object event(std::string_view kind, json::value body) {
  return {{"event", json::object{{kind, std::move(body)}}}};
}

json::value keepalive_event() {
  return event("keepalive", json::object{});
}

// Go's wording for a process's end (os.ProcessState.String()), which the SDK shows:
// "exit status 3", "signal: killed".
std::string signal_words(int sig) {
  const char* d = sigdescr_np(sig);
  std::string s = d ? d : "signal " + std::to_string(sig);
  if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

// The end event of an ended exec; nullopt for an exec that timed out (its stream
// ends with deadline_exceeded instead).
std::optional<json::object> end_event(const session::ExecRecord& r) {
  json::object end;
  if (r.state == store::exec_state::exited && r.exit_code) {
    int64_t code = *r.exit_code;
    std::string status = "exit status " + std::to_string(code);
    if (code != 0) end["exitCode"] = code;
    end["exited"] = true;
    end["status"] = status;
    if (code != 0) end["error"] = status;
    return end;
  }
  if (r.state == store::exec_state::timed_out) return std::nullopt;
  // Killed (on request, by the OOM killer, by a limit) or failed after it started: a
  // process that did not exit by itself.
  int sig = r.signal ? static_cast<int>(*r.signal) : SIGKILL;
  std::string status = "signal: " + signal_words(sig);
  end["exitCode"] = -1;
  end["status"] = status;
  end["error"] = status;
  return end;
}

// "K=V" -> {"K": "V"}.
json::object env_map(const std::vector<std::string>& env) {
  json::object out;
  for (const auto& kv : env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos) continue;
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

// Authorization: Basic base64("<user>:") picks the user; none is `user`.
ApiResult<session::ExecUser> user_of(const Request& req) {
  auto auth = req.header("Authorization");
  if (!auth || auth->empty()) return session::ExecUser::user;
  std::string_view v = *auth;
  if (v.size() < 6 || strncasecmp(v.data(), "basic ", 6) != 0)
    return api_fail(ApiError::invalid_request("Authorization must be Basic base64(\"<user>:\")"));
  v.remove_prefix(6);
  auto decoded = base64_decode(v);
  if (!decoded) return api_fail(ApiError::invalid_request("Authorization: invalid base64"));
  std::string name = decoded->substr(0, decoded->find(':'));
  if (name.empty() || name == "user") return session::ExecUser::user;
  if (name == "root") return session::ExecUser::root;
  return api_fail(ApiError::invalid_request("user " + name + " does not exist in this sandbox (user or root)"));
}

// ProcessSelector {"pid": N} | {"tag": "t"}.
struct Selector {
  std::optional<int64_t> pid;
  std::string tag;
  std::string describe() const { return pid ? "pid " + std::to_string(*pid) : "tag " + tag; }
  bool matches(const session::LiveExec& e) const { return pid ? e.record.pid == *pid : e.tag == tag; }
};

ApiResult<Selector> selector_of(const json::object& msg) {
  auto p = msg.find("process");
  if (p == msg.end() || !p->value().is_object())
    return api_fail(ApiError::invalid_request("field `process` (a process selector) is required"));
  const auto& sel = p->value().as_object();
  Selector s;
  if (auto pid = sel.find("pid"); pid != sel.end()) {
    if (pid->value().is_int64()) s.pid = pid->value().as_int64();
    else if (pid->value().is_uint64()) s.pid = static_cast<int64_t>(pid->value().as_uint64());
    else return api_fail(ApiError::invalid_request("field `process.pid` must be a number"));
    return s;
  }
  if (auto tag = sel.find("tag"); tag != sel.end() && tag->value().is_string()) {
    s.tag = std::string(tag->value().as_string());
    return s;
  }
  return api_fail(ApiError::invalid_request("field `process` must name a pid or a tag"));
}

// The PTY size of a Start or Update: {"size": {"cols", "rows"}}.
ApiResult<std::pair<uint16_t, uint16_t>> pty_size(const json::value& pty) {
  if (!pty.is_object()) return api_fail(ApiError::invalid_request("field `pty` must be an object"));
  const auto* size = pty.as_object().if_contains("size");
  if (!size || !size->is_object()) return api_fail(ApiError::invalid_request("field `pty.size` is required"));
  auto dim = [&](const char* name) -> std::optional<uint16_t> {
    const auto* v = size->as_object().if_contains(name);
    if (!v) return std::nullopt;
    int64_t n = v->is_int64() ? v->as_int64() : v->is_uint64() ? static_cast<int64_t>(v->as_uint64()) : -1;
    if (n < 1 || n > 65535) return std::nullopt;
    return static_cast<uint16_t>(n);
  };
  auto cols = dim("cols"), rows = dim("rows");
  if (!cols || !rows) return api_fail(ApiError::invalid_request("field `pty.size` needs cols and rows, 1..65535"));
  return std::pair{*cols, *rows};
}

std::optional<std::string> string_field(const json::object& o, std::string_view name) {
  const auto* v = o.if_contains(name);
  if (!v || !v->is_string()) return std::nullopt;
  return std::string(v->as_string());
}

// StartRequest -> ExecSpec.
ApiResult<session::ExecSpec> exec_spec(const json::object& msg, const Request& req,
                                       const connect::CallOptions& options) {
  const auto* proc = msg.if_contains("process");
  if (!proc || !proc->is_object()) return api_fail(ApiError::invalid_request("field `process` is required"));
  const auto& p = proc->as_object();
  session::ExecSpec spec;
  auto cmd = string_field(p, "cmd");
  if (!cmd || cmd->empty()) return api_fail(ApiError::invalid_request("field `process.cmd` is required"));
  spec.argv.push_back(*cmd);
  if (const auto* args = p.if_contains("args")) {
    if (!args->is_array()) return api_fail(ApiError::invalid_request("field `process.args` must be a list"));
    for (const auto& a : args->as_array()) {
      if (!a.is_string()) return api_fail(ApiError::invalid_request("field `process.args` must hold strings"));
      spec.argv.emplace_back(a.as_string());
    }
  }
  if (const auto* envs = p.if_contains("envs")) {
    if (!envs->is_object()) return api_fail(ApiError::invalid_request("field `process.envs` must be a map"));
    for (const auto& kv : envs->as_object()) {
      if (!kv.value().is_string()) return api_fail(ApiError::invalid_request("field `process.envs` must hold strings"));
      if (kv.key().empty() || kv.key().find('=') != std::string::npos)
        return api_fail(ApiError::invalid_request("field `process.envs` has an invalid name"));
      spec.env.push_back(std::string(kv.key()) + "=" + std::string(kv.value().as_string()));
    }
  }
  if (auto cwd = string_field(p, "cwd")) spec.cwd = *cwd;
  auto user = user_of(req);
  if (!user) return api_fail(user.error());
  spec.user = *user;
  if (const auto* pty = msg.if_contains("pty"); pty && !pty->is_null()) {
    auto size = pty_size(*pty);
    if (!size) return api_fail(size.error());
    spec.tty = true;
    spec.cols = size->first;
    spec.rows = size->second;
  }
  const auto* in = msg.if_contains("stdin");
  // A PTY's input is its stdin; without `stdin: true` a command reads end of file.
  spec.stdin_open = spec.tty || (in && in->is_bool() && in->as_bool());
  if (auto tag = string_field(msg, "tag")) spec.tag = *tag;
  if (options.timeout && options.timeout->count() > 0) {
    // The client's deadline is the process's: the session layer kills it then (capped
    // at the session's exec ceiling), and its stream ends with deadline_exceeded.
    spec.timeout_ms = static_cast<uint64_t>(options.timeout->count());
    spec.cap_timeout = true;
  }
  return spec;
}

// Bridges one exec's output and end to one Connect stream. Called on the reactor.
class ProcessSink final : public session::OutputSink {
 public:
  ProcessSink(SessionManager& mgr, Caller caller, std::string sandbox, std::shared_ptr<connect::ServerStream> stream,
              bool tty)
      : mgr_(mgr), caller_(std::move(caller)), sandbox_(std::move(sandbox)), stream_(std::move(stream)), tty_(tty) {}

  void on_output(session::Stream s, uint64_t, std::string_view data) override {
    std::string_view kind = tty_ ? "pty" : s == session::Stream::stdout_stream ? "stdout" : "stderr";
    stream_->send(event("data", json::object{{kind, base64_encode(data)}}));
  }
  void on_exit(const session::ExecRecord& record) override {
    // An exec ended by its sandbox's end: the stream drops, as E2B's does. Asked after
    // the reactor has finished the termination that ended the exec.
    mgr_.check_live(caller_, sandbox_, [stream = stream_, record](Result<void> live) {
      if (!live) return stream->drop();
      auto end = end_event(record);
      if (!end) {
        ApiError e = ApiError::request_timeout(record.reason.empty() ? "the process's deadline passed" : record.reason);
        e.wire_code = "deadline_exceeded";
        return stream->fail(e);
      }
      stream->send(event("end", std::move(*end)));
      stream->finish();
    });
  }
  bool closed() const override { return stream_->closed(); }
  void when_drained(size_t max_queued, std::function<void()> resume) override {
    stream_->on_drained(max_queued, std::move(resume));
  }

 private:
  SessionManager& mgr_;
  Caller caller_;
  std::string sandbox_;
  std::shared_ptr<connect::ServerStream> stream_;
  bool tty_;
};

// The live exec a selector names, or not_found.
void resolve(SessionManager& mgr, const Caller& caller, const std::string& sandbox, Selector sel,
             std::function<void(ApiResult<session::LiveExec>)> then) {
  mgr.live_execs(caller, sandbox, [sel, then = std::move(then)](Result<std::vector<session::LiveExec>> list) {
    if (!list) return then(api_fail(from_error(list.error())));
    for (auto& e : *list)
      if (sel.matches(e)) return then(std::move(e));
    then(api_fail(ApiError::not_found("process with " + sel.describe() + " not found")));
  });
}

// A unary handler's common part: the message, the sandbox check, then `body`.
using UnaryBody = std::function<void(std::shared_ptr<Responder>, const json::object& msg)>;
Handler unary(E2bContext& ctx, UnaryBody body) {
  return [&ctx, body = std::move(body)](Request& req, Responder& res) {
    auto msg = connect::unary_request(req);
    if (!msg) return res.error(msg.error());
    if (auto o = connect::call_options(req); !o) return res.error(o.error());
    with_live_sandbox(ctx, res, [r = res.shared_from_this(), body, msg = std::move(*msg)] { body(r, msg); });
  };
}

// Completion of a session-layer call answered with an empty message.
session::Done<void> empty_reply(std::shared_ptr<Responder> r) {
  return [r](Result<void> done) {
    if (!done) return r->error(from_error(done.error()));
    connect::reply(*r, json::object{});
  };
}

void start(E2bContext& ctx, Request& req, Responder& res) {
  auto msg = connect::stream_request(req);
  if (!msg) return connect::fail_stream(res, msg.error());
  auto options = connect::call_options(req);
  if (!options) return connect::fail_stream(res, options.error());
  auto spec = exec_spec(*msg, req, *options);
  if (!spec) return connect::fail_stream(res, spec.error());
  // The deadline is the exec's own timeout (the session layer kills it then); the
  // stream keeps only the keepalive.
  connect::CallOptions stream_options{std::nullopt, options->keepalive};
  SessionManager& mgr = ctx.api.sessions;
  Caller caller = caller_of(req);
  std::string sandbox = sandbox_id(req);
  with_live_sandbox(ctx, res, [&mgr, r = res.shared_from_this(), caller, sandbox, stream_options,
                               spec = std::move(*spec)]() mutable {
    bool tty = spec.tty;
    mgr.start_exec(caller, sandbox, std::move(spec),
                   [&mgr, r, caller, sandbox, stream_options, tty](Result<session::ExecRecord> started) {
                     if (!started) return connect::fail_stream(*r, from_error(started.error()));
                     if (started->pid == 0)  // it never ran: the command could not be started
                       return connect::fail_stream(
                           *r, ApiError::internal(started->reason, "error starting process: " + started->reason));
                     auto stream = connect::ServerStream::start(*r, stream_options, keepalive_event());
                     stream->send(event("start", json::object{{"pid", started->pid}}));
                     auto sink = std::make_shared<ProcessSink>(mgr, caller, sandbox, stream, tty);
                     mgr.follow_exec(caller, sandbox, started->id, 0, 0, sink, [stream](Result<void> found) {
                       if (!found) stream->fail(from_error(found.error()));
                     });
                   });
  });
}

void connect_to(E2bContext& ctx, Request& req, Responder& res) {
  auto msg = connect::stream_request(req);
  if (!msg) return connect::fail_stream(res, msg.error());
  auto options = connect::call_options(req);
  if (!options) return connect::fail_stream(res, options.error());
  auto sel = selector_of(*msg);
  if (!sel) return connect::fail_stream(res, sel.error());
  SessionManager& mgr = ctx.api.sessions;
  Caller caller = caller_of(req);
  std::string sandbox = sandbox_id(req);
  with_live_sandbox(ctx, res, [&mgr, r = res.shared_from_this(), caller, sandbox, options = *options, sel = *sel] {
    resolve(mgr, caller, sandbox, sel, [&mgr, r, caller, sandbox, options](ApiResult<session::LiveExec> e) {
      if (!e) return connect::fail_stream(*r, e.error());
      // Connect started nothing: at its deadline only the stream ends.
      auto stream = connect::ServerStream::start(*r, options, keepalive_event());
      stream->send(event("start", json::object{{"pid", e->record.pid}}));
      auto sink = std::make_shared<ProcessSink>(mgr, caller, sandbox, stream, e->tty);
      mgr.follow_exec(caller, sandbox, e->record.id, e->stdout_kept, e->stderr_kept, sink,
                      [stream](Result<void> found) {
                        if (!found) stream->fail(from_error(found.error()));
                      });
    });
  });
}

json::object process_info(const session::LiveExec& e) {
  const auto& r = e.record;
  json::array args;
  std::string cmd;
  if (!r.argv.empty()) {
    cmd = r.argv[0];
    for (std::size_t i = 1; i < r.argv.size(); ++i) args.emplace_back(r.argv[i]);
  } else {
    cmd = "/bin/sh";
    args = {"-c", r.cmd};
  }
  json::object config{{"cmd", cmd}, {"args", std::move(args)}, {"envs", env_map(e.env)}};
  if (!r.cwd.empty()) config["cwd"] = r.cwd;
  json::object info{{"config", std::move(config)}, {"pid", r.pid}};
  if (!e.tag.empty()) info["tag"] = e.tag;
  return info;
}

void answer_list(Responder& r, Result<std::vector<session::LiveExec>> list) {
  if (!list) return r.error(from_error(list.error()));
  json::array out;
  for (const auto& e : *list) out.push_back(process_info(e));
  connect::reply(r, json::object{{"processes", std::move(out)}});
}

}  // namespace

void add_envd_process_routes(E2bContext& ctx) {
  Router& r = ctx.api.server.sandbox_router();
  SessionManager& mgr = ctx.api.sessions;
  auto route = [&](std::string_view method, Handler h) {
    r.add(http::verb::post, std::string(kService) + std::string(method), RouteDoc{}, std::move(h),
          connect::route_options());
  };

  route("Start", [&ctx](Request& req, Responder& res) { start(ctx, req, res); });
  route("Connect", [&ctx](Request& req, Responder& res) { connect_to(ctx, req, res); });

  route("List", unary(ctx, [&mgr](std::shared_ptr<Responder> r, const json::object&) {
          const Request& req = r->request();
          mgr.live_execs(caller_of(req), sandbox_id(req), [r](Result<std::vector<session::LiveExec>> list) {
            answer_list(*r, std::move(list));
          });
        }));

  route("SendInput", unary(ctx, [&mgr](std::shared_ptr<Responder> r, const json::object& msg) {
          auto sel = selector_of(msg);
          if (!sel) return r->error(sel.error());
          const auto* input = msg.if_contains("input");
          if (!input || !input->is_object())
            return r->error(ApiError::invalid_request("field `input` (stdin or pty) is required"));
          auto data = string_field(input->as_object(), "stdin");
          if (!data) data = string_field(input->as_object(), "pty");
          if (!data) return r->error(ApiError::invalid_request("field `input` must hold stdin or pty bytes"));
          auto bytes = base64_decode(*data);
          if (!bytes) return r->error(ApiError::invalid_request("field `input` must be base64"));
          const Request& req = r->request();
          Caller caller = caller_of(req);
          std::string sandbox = sandbox_id(req);
          resolve(mgr, caller, sandbox, *sel,
                  [&mgr, r, caller, sandbox, bytes = std::move(*bytes)](ApiResult<session::LiveExec> e) mutable {
                    if (!e) return r->error(e.error());
                    mgr.write_stdin(caller, sandbox, e->record.id, std::move(bytes), false, empty_reply(r));
                  });
        }));

  route("CloseStdin", unary(ctx, [&mgr](std::shared_ptr<Responder> r, const json::object& msg) {
          auto sel = selector_of(msg);
          if (!sel) return r->error(sel.error());
          const Request& req = r->request();
          Caller caller = caller_of(req);
          std::string sandbox = sandbox_id(req);
          resolve(mgr, caller, sandbox, *sel, [&mgr, r, caller, sandbox](ApiResult<session::LiveExec> e) {
            if (!e) return r->error(e.error());
            mgr.write_stdin(caller, sandbox, e->record.id, {}, true, empty_reply(r));
          });
        }));

  route("SendSignal", unary(ctx, [&mgr](std::shared_ptr<Responder> r, const json::object& msg) {
          auto sel = selector_of(msg);
          if (!sel) return r->error(sel.error());
          auto name = string_field(msg, "signal");
          const auto* num = msg.if_contains("signal");
          session::KillSpec kill;
          if ((name && *name == "SIGNAL_SIGKILL") || (num && num->is_int64() && num->as_int64() == SIGKILL)) {
            kill.signal = SIGKILL;
            kill.grace = std::chrono::milliseconds(0);
          } else if ((name && *name == "SIGNAL_SIGTERM") || (num && num->is_int64() && num->as_int64() == SIGTERM)) {
            kill.signal = SIGTERM;  // then SIGKILL after the native default grace
          } else {
            return r->error(ApiError::invalid_request("field `signal` must be SIGNAL_SIGKILL or SIGNAL_SIGTERM"));
          }
          const Request& req = r->request();
          Caller caller = caller_of(req);
          std::string sandbox = sandbox_id(req);
          resolve(mgr, caller, sandbox, *sel, [&mgr, r, caller, sandbox, kill](ApiResult<session::LiveExec> e) {
            if (!e) return r->error(e.error());
            mgr.kill_exec(caller, sandbox, e->record.id, kill, [r](Result<session::ExecRecord> done) {
              if (!done) return r->error(from_error(done.error()));
              connect::reply(*r, json::object{});
            });
          });
        }));

  route("Update", unary(ctx, [&mgr](std::shared_ptr<Responder> r, const json::object& msg) {
          auto sel = selector_of(msg);
          if (!sel) return r->error(sel.error());
          const auto* pty = msg.if_contains("pty");
          if (!pty) return r->error(ApiError::invalid_request("field `pty` is required"));
          auto size = pty_size(*pty);
          if (!size) return r->error(size.error());
          const Request& req = r->request();
          Caller caller = caller_of(req);
          std::string sandbox = sandbox_id(req);
          resolve(mgr, caller, sandbox, *sel, [&mgr, r, caller, sandbox, size = *size](ApiResult<session::LiveExec> e) {
            if (!e) return r->error(e.error());
            if (!e->tty) return r->error(ApiError::invalid_request("process " + std::to_string(e->record.pid) +
                                                                   " has no PTY"));
            mgr.resize_exec(caller, sandbox, e->record.id, size.first, size.second, empty_reply(r));
          });
        }));
}

}  // namespace cela::api::e2b
