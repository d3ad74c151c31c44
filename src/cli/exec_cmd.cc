#include "cli/exec_cmd.h"

#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "cli/client_common.h"
#include "cli/sandbox_output.h"
#include "cli/stop_signals.h"
#include "common/fd.h"
#include "runtime/outcome.h"

namespace cela::cli {
namespace {
namespace json = boost::json;
using client::Client;
using Clock = std::chrono::steady_clock;

// How long the exec has between the signal we forward and SIGKILL (the daemon's grace),
// and how much longer we wait for its end before giving up on the daemon.
constexpr double kKillGraceS = 2.0;
constexpr auto kEndAfterKill = std::chrono::seconds(8);
}  // namespace

std::string exec_path(const std::string& sid, const std::string& eid) {
  return session_path(sid) + "/execs/" + client::url_encode(eid);
}

// Streams an exec's output to our stdout/stderr until its `exit` event, reconnecting
// with Last-Event-ID when the stream drops (the server replays exactly what came after
// it). Returns the final exec record.
Result<json::object> stream_exec(const Client& c, const std::string& sid, const std::string& eid,
                                 bool raw) {
  std::fflush(stdout);
  SandboxOutput out(1, raw), err(2, raw);
  std::string target = exec_path(sid, eid) + "/output?follow=1";
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
        (ev.event == "stdout" ? out : err).write(*bytes);
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
    if (record) {
      out.finish();
      err.finish();
      return std::move(*record);
    }
    if (bad) return std::unexpected(*bad);
    // An answer from the server (exec or session unknown, session gone): final.
    if (!r && r.error().code != ErrorCode::system) return std::unexpected(r.error());
    if (last_id != before) attempts = 0;
    if (++attempts > 8) {
      if (!r) return std::unexpected(r.error());
      return fail(ErrorCode::system,
                  "the output stream of exec " + eid + " ended before the exec did");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100 * attempts));
  }
}

// A finished exec record as the runner's result, so that `cela exec` exits with the
// codes `cela run` does through the one mapping (runtime::exit_code_for).
runtime::RunResult run_result_of(const json::object& rec) {
  using runtime::RunState;
  runtime::RunResult r;  // state failed unless the record names another
  std::string state = str(rec, "state");
  for (RunState s : {RunState::exited, RunState::timed_out, RunState::oom_killed, RunState::killed,
                     RunState::failed})
    if (runtime::to_string(s) == state) r.state = s;
  if (auto* e = rec.if_contains("exit_code"); e && e->is_int64())
    r.exit_code = static_cast<int>(e->as_int64());
  if (auto* s = rec.if_contains("signal"); s && s->is_int64())
    r.signal = static_cast<int>(s->as_int64());
  r.reason = str(rec, "reason");
  return r;
}

// Copies our stdin to the exec's (POST …/stdin, one chunk per read), then closes it
// (?close=1) at EOF. Returns early when `stop_fd` becomes readable (the exec ended) or
// the exec no longer takes input (409: it ended or closed its stdin).
void forward_stdin(const Client& c, const std::string& target, int stop_fd) {
  const client::Headers binary{{"Content-Type", "application/octet-stream"}};
  char buf[65536];
  for (;;) {
    pollfd fds[2] = {{0, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      (void)c.request("POST", target + "?close=1", {}, binary);
      return;
    }
    if (!c.request("POST", target, std::string_view(buf, static_cast<size_t>(n)), binary)) return;
  }
}

void Notifier::notify() const {
  uint64_t one = 1;
  (void)!::write(fd.get(), &one, sizeof one);
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "SIGTERM";
}

namespace {

// Waits until `done_fd` is readable (the output stream reached the exec's end),
// turning stop signals into kills: the first is forwarded to the exec (SIGKILL after
// the grace), a second one kills at once. Returns the first stop signal, if any.
std::optional<int> wait_for_end(const Client& c, const std::string& kill_target, int done_fd,
                                int signal_fd) {
  std::optional<int> stopped_by;
  std::optional<Clock::time_point> give_up;
  // Each kill is sent from its own thread: a daemon slow to answer must not hold up
  // the wait, nor the give-up below.
  std::vector<std::jthread> kills;
  for (;;) {
    int wait_ms = -1;
    if (give_up)
      wait_ms = static_cast<int>(std::max<int64_t>(
          0,
          std::chrono::duration_cast<std::chrono::milliseconds>(*give_up - Clock::now()).count()));
    pollfd fds[2] = {{done_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    int n = ::poll(fds, 2, wait_ms);
    if (n < 0 && errno == EINTR) continue;
    if (fds[0].revents) return stopped_by;
    if (fds[1].revents) {
      signalfd_siginfo si{};
      if (::read(signal_fd, &si, sizeof si) != sizeof si) continue;
      json::object kill{
          {"signal", stopped_by ? "SIGKILL" : signal_name(static_cast<int>(si.ssi_signo))},
          {"grace_s", kKillGraceS}};
      if (!stopped_by) stopped_by = static_cast<int>(si.ssi_signo);
      give_up = Clock::now() + kEndAfterKill;
      kills.emplace_back([&c, kill_target, kill] {
        if (auto k = c.json("POST", kill_target, kill); !k)
          std::fprintf(stderr, "cela: kill: %s\n", k.error().message().c_str());
      });
    }
    if (give_up && Clock::now() >= *give_up) {
      // The daemon did not report the end: the output thread (and a kill) may be
      // blocked on their sockets for good, so leave without unwinding them.
      std::fprintf(stderr, "cela: the exec did not end after it was killed\n");
      std::fflush(stdout);
      runtime::RunResult r;
      r.state = runtime::RunState::killed;
      r.signal = *stopped_by;
      std::_Exit(runtime::exit_code_for(r));
    }
  }
}

// ---- exec ----

struct ExecOpts {
  Conn conn;
  std::string session, cwd, user;
  std::vector<std::string> env, command;
  int64_t timeout_s = 0;
  bool detach = false;
  bool stdin_always = false;
  bool raw = false;
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
  // A terminal is not forwarded unless asked (the command would wait on a keyboard
  // nobody means to type on); a pipe or file is.
  bool with_stdin = !o.detach && (o.stdin_always || !::isatty(0));
  if (with_stdin) body["stdin_open"] = true;
  auto c = Client::make(o.conn.url, o.conn.key);
  if (!c) return report(c.error());

  UniqueFd signal_fd = block_stop_signals();
  auto started = c->json("POST", session_path(o.session) + "/execs", body);
  if (!started) return report(started.error());
  std::string eid = str(*started, "id");
  if (o.detach) {
    std::printf("%s\n", eid.c_str());
    return 0;
  }

  Notifier output_done, stdin_stop;
  std::optional<Result<json::object>> outcome;
  std::jthread output([&] {
    outcome = stream_exec(*c, o.session, eid, o.raw);
    output_done.notify();
  });
  std::jthread input;
  if (with_stdin)
    input = std::jthread(
        [&] { forward_stdin(*c, exec_path(o.session, eid) + "/stdin", stdin_stop.fd.get()); });

  std::optional<int> stopped_by =
      wait_for_end(*c, exec_path(o.session, eid) + "/kill", output_done.fd.get(), signal_fd.get());
  output.join();
  stdin_stop.notify();
  if (input.joinable()) input.join();

  if (!*outcome) return report(outcome->error());
  runtime::RunResult result = run_result_of(**outcome);
  if (result.state != runtime::RunState::exited)
    std::fprintf(stderr, "cela: exec %s%s\n", str(**outcome, "state").c_str(),
                 result.reason.empty() ? "" : (": " + result.reason).c_str());
  if (stopped_by) {  // as `cela run` told to stop: 128 + the signal we received
    result.state = runtime::RunState::killed;
    result.signal = *stopped_by;
  }
  return runtime::exit_code_for(result);
}

// ---- logs ----

int logs(const Conn& conn, const std::string& sid, const std::string& eid, bool follow, bool raw) {
  auto c = Client::make(conn.url, conn.key);
  if (!c) return report(c.error());
  if (follow) {
    auto rec = stream_exec(*c, sid, eid, raw);
    return rec ? 0 : report(rec.error());
  }
  auto out = c->json("GET", exec_path(sid, eid) + "/output");
  if (!out) return report(out.error());
  bool b64 = str(*out, "encoding") == "base64";
  for (auto [name, fd] : {std::pair{"stdout", 1}, std::pair{"stderr", 2}}) {
    std::string data = str(*out, name);
    if (b64) {
      auto d = client::base64_decode(data);
      if (!d) return report(d.error());
      data = std::move(*d);
    }
    SandboxOutput sink(fd, raw);
    sink.write(data);
    sink.finish();
  }
  return 0;
}

constexpr const char* kRawHelp =
    "Pass the exec's output to a terminal unchanged (by default control sequences are shown "
    "escaped, e.g. \\x1b; pipes and files always get the exact bytes)";

}  // namespace

void add_exec_commands(CLI::App& app, int& exit_code) {
  auto ex = std::make_shared<ExecOpts>();
  auto* e = app.add_subcommand(
      "exec", "Run a command in a session, streaming its output; exits with its code");
  add_conn(e, ex->conn);
  e->add_option("session", ex->session, "Session id")->required();
  e->add_option("--cwd", ex->cwd, "Working directory inside");
  e->add_option("--env", ex->env, "Environment variable K=V (repeatable)")->allow_extra_args(false);
  e->add_option("--user", ex->user, "Run as `user` or `root`")
      ->check(CLI::IsMember({"user", "root"}));
  e->add_option("--timeout-s", ex->timeout_s, "Wall-clock timeout in seconds");
  e->add_flag("--stdin,-i", ex->stdin_always,
              "Forward stdin even when it is a terminal (a pipe or file always is)");
  e->add_flag("--detach,-d", ex->detach,
              "Print the exec id and return at once, stdin not forwarded (see `cela logs`)");
  e->add_flag("--raw", ex->raw, kRawHelp);
  e->add_option("command", ex->command, "CMD [ARGS...] after --")->expected(-1)->required();
  e->footer(
      "Exit code: the command's own; 128+N when killed by signal N (or when cela exec received "
      "signal N: "
      "it then kills the exec); 124 timed out; 121 memory limit (OOM); 125 sandbox failure; 126 "
      "cannot "
      "execute; 127 command not found; 1 client or API error; 2 bad usage.");
  e->callback([ex, &exit_code] { exit_code = exec(*ex); });

  struct LogsOpts {
    Conn conn;
    std::string session, exec;
    bool follow = false;
    bool raw = false;
  };
  auto lg = std::make_shared<LogsOpts>();
  auto* l = app.add_subcommand("logs", "Print an exec's captured output (or follow it)");
  add_conn(l, lg->conn);
  l->add_option("session", lg->session, "Session id")->required();
  l->add_option("exec", lg->exec, "Exec id")->required();
  l->add_flag("--follow,-f", lg->follow,
              "Stream the output as it comes until the exec ends (resumes where it was if the "
              "connection drops)");
  l->add_flag("--raw", lg->raw, kRawHelp);
  l->footer(
      "Exit code: 0 once the output is printed (whatever the exec's own); 1 client or API error; 2 "
      "bad usage.");
  l->callback([lg, &exit_code] { exit_code = logs(lg->conn, lg->session, lg->exec, lg->follow, lg->raw); });
}

}  // namespace cela::cli
