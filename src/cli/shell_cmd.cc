#include "cli/shell_cmd.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <thread>

#include "cli/client_common.h"
#include "cli/exec_cmd.h"
#include "cli/raw_terminal.h"
#include "cli/stop_signals.h"
#include "runtime/outcome.h"

namespace cela::cli {
namespace {
namespace json = boost::json;
using client::Client;

// The template user's login shell, whatever the image: the account's shell from the
// passwd database, /bin/sh when it names none that runs.
constexpr const char* kLoginShell =
    "s=$(getent passwd \"$(id -u)\" 2>/dev/null | cut -d: -f7); [ -x \"$s\" ] || s=/bin/sh; exec \"$s\" -l";

struct ShellOpts {
  Conn conn;
  std::string session, cwd, user;
  std::vector<std::string> env, command;
};

// The size to ask for: our terminal's (stdout's, else stdin's), within the API's bounds.
std::pair<uint16_t, uint16_t> local_size() {
  auto size = terminal_size(1);
  if (!size) size = terminal_size(0);
  if (!size) return {80, 24};
  return {std::min<uint16_t>(size->first, 1000), std::min<uint16_t>(size->second, 1000)};
}

json::object size_body(std::pair<uint16_t, uint16_t> size) {
  return {{"cols", size.first}, {"rows", size.second}};
}

int shell(const ShellOpts& o) {
  json::object body = size_body(local_size()), env;
  json::array argv;
  if (o.command.empty()) {
    for (const char* a : {"/bin/sh", "-c", kLoginShell}) argv.emplace_back(a);
  } else {
    for (auto& a : o.command) argv.emplace_back(a);
  }
  body["argv"] = argv;
  body["tty"] = true;
  body["stdin_open"] = true;
  if (!o.cwd.empty()) body["cwd"] = o.cwd;
  if (!o.user.empty()) body["user"] = o.user;
  std::string bad;
  if (!env_object(o.env, env, bad)) return usage("bad --env '" + bad + "' (want K=V)");
  if (!env.empty()) body["env"] = env;
  auto c = Client::make(o.conn.url, o.conn.key);
  if (!c) return report(c.error());

  // Before any thread: the stop signals and SIGWINCH are read from signalfds.
  UniqueFd stop_fd = block_stop_signals();
  UniqueFd winch_fd = block_winch();
  auto started = c->json("POST", session_path(o.session) + "/execs", body);
  if (!started) return report(started.error());
  std::string eid = str(*started, "id");
  std::string target = exec_path(o.session, eid);

  std::optional<Result<json::object>> outcome;
  std::optional<int> stopped_by;
  {
    // Raw from here until the exec has ended, whichever way this returns: the stop
    // signals are blocked and handled below, so this scope is always left normally.
    RawTerminal raw(0);
    Notifier output_done, stdin_stop;
    std::jthread output([&] {
      outcome = stream_exec(*c, o.session, eid, true);
      output_done.notify();
    });
    std::jthread input([&] { forward_stdin(*c, target + "/stdin", stdin_stop.fd.get()); });
    std::vector<std::jthread> calls;  // resizes and kills, each on its own thread
    for (;;) {
      pollfd fds[3] = {{output_done.fd.get(), POLLIN, 0}, {stop_fd.get(), POLLIN, 0}, {winch_fd.get(), POLLIN, 0}};
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[0].revents) break;
      signalfd_siginfo si{};
      if (fds[2].revents && ::read(winch_fd.get(), &si, sizeof si) == sizeof si)
        calls.emplace_back([&c, target, size = local_size()] { (void)c->json("POST", target + "/resize", size_body(size)); });
      if (fds[1].revents && ::read(stop_fd.get(), &si, sizeof si) == sizeof si) {
        // A signal from outside (a key would be a byte in raw mode): the exec ends too.
        json::object kill{{"signal", stopped_by ? "SIGKILL" : signal_name(static_cast<int>(si.ssi_signo))},
                          {"grace_s", 2.0}};
        if (!stopped_by) stopped_by = static_cast<int>(si.ssi_signo);
        calls.emplace_back([&c, target, kill] { (void)c->json("POST", target + "/kill", kill); });
      }
    }
    output.join();
    stdin_stop.notify();
    // The input thread may sit in a read of our terminal: it sees stdin_stop next.
    input.join();
  }
  if (!outcome || !*outcome) return report(outcome ? outcome->error() : Error{ErrorCode::internal, 0, "no outcome"});
  runtime::RunResult result = run_result_of(**outcome);
  if (result.state != runtime::RunState::exited)
    std::fprintf(stderr, "cela: exec %s%s\n", str(**outcome, "state").c_str(),
                 result.reason.empty() ? "" : (": " + result.reason).c_str());
  if (stopped_by) {
    result.state = runtime::RunState::killed;
    result.signal = *stopped_by;
  }
  return runtime::exit_code_for(result);
}

}  // namespace

void add_shell_command(CLI::App& app, int& exit_code) {
  auto so = std::make_shared<ShellOpts>();
  auto* s = app.add_subcommand("shell", "An interactive terminal in a session (like docker exec -it)");
  add_conn(s, so->conn);
  s->add_option("session", so->session, "Session id")->required();
  s->add_option("--cwd", so->cwd, "Working directory inside");
  s->add_option("--env", so->env, "Environment variable K=V (repeatable)")->allow_extra_args(false);
  s->add_option("--user", so->user, "Run as `user` or `root`")->check(CLI::IsMember({"user", "root"}));
  s->add_option("command", so->command, "CMD [ARGS...] after -- (default: the user's login shell)")->expected(-1);
  s->footer(
      "The command runs on a terminal of the session (TERM=xterm-256color); the local terminal is in raw mode "
      "until it ends, so Ctrl-C, Ctrl-Z and Ctrl-D go to it. Exit code: the command's own; 128+N when killed by "
      "signal N (or when cela shell received signal N); 1 client or API error; 2 bad usage.");
  s->callback([so, &exit_code] { exit_code = shell(*so); });
}

}  // namespace cela::cli
