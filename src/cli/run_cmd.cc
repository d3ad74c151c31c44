#include "cli/run_cmd.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>

#include "cli/sandbox_output.h"
#include "cli/stop_signals.h"
#include "common/units.h"
#include "jail/result.h"
#include "jail/sandbox.h"
#include "jail/userns.h"
#include "rootfs/template.h"
#include "runtime/jail.h"
#include "session/exec_env.h"

namespace cela::cli {
namespace {

using namespace cela::jail;
using agent::ExecRequest;
using Clock = std::chrono::steady_clock;

struct RunOptions {
  std::string template_name = "base";
  std::string memory = "512m";
  double cpus = 1.0;
  uint64_t pids = 256;
  std::string timeout = "300s";
  std::string disk = "1g";
  std::vector<std::string> env;
  std::string user = "user";
  std::string cwd;
  bool json = false;
  std::string output_file;
  bool allow_sudo = false;
  bool no_allow_sudo = false;
  bool raw = false;
  std::string templates_dir = "/var/lib/cela/templates";
  std::vector<std::string> command;
};

// A usage error: one line on stderr, exit code 2.
struct UsageError {
  std::string message;
};

struct Plan {
  SandboxSpec spec;
  ExecRequest exec;
  uint64_t timeout_ms = 0;
};

Result<Plan> make_plan(const RunOptions& o, const rootfs::Template& tmpl) {
  Plan p;
  auto memory = parse_size(o.memory);
  if (!memory) return std::unexpected(memory.error());
  auto disk = parse_size(o.disk);
  if (!disk) return std::unexpected(disk.error());
  auto timeout = parse_duration(o.timeout);
  if (!timeout) return std::unexpected(timeout.error());
  if (!(o.cpus > 0 && o.cpus <= 1024)) return fail(ErrorCode::invalid_argument, "bad --cpus (want e.g. 0.5, 2)");
  if (o.pids == 0) return fail(ErrorCode::invalid_argument, "bad --pids: must be > 0");
  if (o.user != "user" && o.user != "root")
    return fail(ErrorCode::invalid_argument, "bad --user '" + o.user + "' (want user or root)");
  if (o.command.empty()) return fail(ErrorCode::invalid_argument, "missing command (cela run [OPTIONS] -- CMD [ARGS...])");

  p.spec.rootfs.layers = tmpl.layers;
  for (const auto& b : tmpl.binds) p.spec.rootfs.binds.emplace_back(b.source, b.target);
  p.spec.rootfs.disk_bytes = *disk;
  p.spec.limits = {*memory, o.cpus, o.pids};
  p.timeout_ms = static_cast<uint64_t>(timeout->count());

  if (o.allow_sudo && o.no_allow_sudo)
    return fail(ErrorCode::invalid_argument, "--allow-sudo and --no-allow-sudo contradict each other");
  // The same identity, environment and privilege rules as a daemon session's exec.
  session::ExecEnvInput in;
  in.argv = o.command;
  in.user = o.user == "root" ? session::ExecUser::root : session::ExecUser::user;
  in.cwd = o.cwd;
  std::optional<bool> asked;
  if (o.allow_sudo || o.no_allow_sudo) asked = o.allow_sudo;
  in.allow_sudo = session::sudo_allowed(tmpl, asked);
  in.fsize_bytes = *disk;
  for (const auto& kv : o.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail(ErrorCode::invalid_argument, "bad --env '" + kv + "' (want K=V)");
    in.env.push_back(kv);
  }
  auto process = session::process_spec(tmpl.user, in);
  if (!process) return std::unexpected(process.error());
  p.exec = runtime::to_exec_request(*process);
  return p;
}

// Our stdin on its way to the command's, never blocking the supervise loop: a command
// that does not read its stdin must not hold up its output, the timeout or a stop
// signal. At most kMaxPending bytes wait for the command; past that our stdin is not
// read until it has taken some.
class StdinForward {
 public:
  static constexpr size_t kMaxPending = 1 << 20;

  // Takes the host end of the command's stdin pipe; makes it non-blocking (our own fd 0
  // is left as it is: its file description may be shared with the caller's shell).
  explicit StdinForward(UniqueFd to) : to_(std::move(to)) {
    if (to_) ::fcntl(to_.get(), F_SETFL, ::fcntl(to_.get(), F_GETFL) | O_NONBLOCK);
  }

  // The fd to poll for reading (our stdin) or -1, and the one to poll for writing.
  int read_fd() const { return to_ && !eof_ && pending_.size() < kMaxPending ? 0 : -1; }
  int write_fd() const { return to_ && !pending_.empty() ? to_.get() : -1; }

  void on_readable() {
    char buf[65536];
    ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (n <= 0) {
      eof_ = true;
      if (pending_.empty()) to_.reset();  // EOF reaches the command once it has the rest
      return;
    }
    pending_.append(buf, static_cast<size_t>(n));
    on_writable();  // usually the pipe has room: no extra poll round
  }

  void on_writable() {
    while (!pending_.empty()) {
      ssize_t n = ::write(to_.get(), pending_.data(), pending_.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return;
        // EPIPE: the command closed its stdin. Nothing more will be forwarded.
        pending_.clear();
        to_.reset();
        return;
      }
      pending_.erase(0, static_cast<size_t>(n));
    }
    if (eof_) to_.reset();
  }

  // The sandbox is gone: stop forwarding.
  void close() {
    pending_.clear();
    to_.reset();
  }

 private:
  UniqueFd to_;
  std::string pending_;
  bool eof_ = false;
};

// Copies from `from` to `to`; returns false at EOF or error.
bool pump(int from, SandboxOutput& to) {
  char buf[65536];
  ssize_t n = ::read(from, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
  if (n <= 0) {
    to.finish();
    return false;
  }
  to.write(std::string_view(buf, static_cast<size_t>(n)));
  return true;
}

// Runs the exec to its end: streams output, forwards stdin, enforces the timeout,
// stops on SIGTERM/SIGINT. Kills the sandbox when the main process ends.
void supervise(Sandbox& sb, StartedExec& ex, const Plan& plan, SandboxOutput& out, SandboxOutput& err,
               int signal_fd, RunObservation& obs) {
  UniqueFd timer(::timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC));
  itimerspec its{};
  its.it_value.tv_sec = static_cast<time_t>(plan.timeout_ms / 1000);
  its.it_value.tv_nsec = static_cast<long>((plan.timeout_ms % 1000) * 1'000'000);
  ::timerfd_settime(timer.get(), 0, &its, nullptr);

  StdinForward input(std::move(ex.stdin_w));
  bool ended = false;  // main process gone or sandbox killed
  int out_r = ex.stdout_r.get(), err_r = ex.stderr_r.get();
  while (out_r >= 0 || err_r >= 0 || !ended) {
    pollfd fds[8] = {{out_r, POLLIN, 0},
                     {err_r, POLLIN, 0},
                     {ended ? -1 : input.read_fd(), POLLIN, 0},
                     {ended ? -1 : sb.control_fd(), POLLIN, 0},
                     {ended ? -1 : signal_fd, POLLIN, 0},
                     {ended ? -1 : timer.get(), POLLIN, 0},
                     {ended ? -1 : sb.pidfd(), POLLIN, 0},
                     {ended ? -1 : input.write_fd(), POLLOUT, 0}};
    if (::poll(fds, 8, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[0].revents && !pump(out_r, out)) out_r = -1;
    if (fds[1].revents && !pump(err_r, err)) err_r = -1;
    if (fds[2].revents) input.on_readable();
    if (fds[7].revents) input.on_writable();
    auto stop = [&] {
      ended = true;
      input.close();
      sb.kill();  // the rest of the tree dies with init; pipes reach EOF
    };
    if (fds[3].revents) {
      auto ev = sb.next_event();
      if (!ev) {
        obs.failure = "the sandbox's init died";
        stop();
      } else if (ev->type() == agent::MessageType::exited && ev->body.at("id").to_number<uint64_t>() == ex.id) {
        obs.wait_status = ev->body.at("status").to_number<int>();
        stop();
      }
    }
    if (fds[4].revents) {
      signalfd_siginfo si{};
      if (::read(signal_fd, &si, sizeof si) == sizeof si) obs.runner_signal = static_cast<int>(si.ssi_signo);
      stop();
    }
    if (fds[5].revents) {
      obs.timed_out = true;
      stop();
    }
    if (fds[6].revents && !ended) {
      obs.failure = "the sandbox's init died";
      stop();
    }
  }
}

// Removes run-<N> cgroups whose slot N no runner holds (ours is already clean-able).
void reclaim_stale_runs(CgroupHost& cgroups, const UidSlot& own) {
  auto names = cgroups.list();
  if (!names) return;
  for (const auto& name : *names) {
    if (!name.starts_with("run-")) continue;
    uint32_t index = 0;
    auto [ptr, ec] = std::from_chars(name.data() + 4, name.data() + name.size(), index);
    if (ec != std::errc() || ptr != name.data() + name.size() || index == own.index()) continue;
    auto slot = UidSlot::try_acquire(index);
    if (!slot || !*slot) continue;  // in use (or unknowable): not ours to touch
    if (auto r = cgroups.remove_stale(name); !r)
      std::fprintf(stderr, "cela: stale cgroup %s: %s\n", name.c_str(), r.error().message().c_str());
  }
}

int run(const RunOptions& o) {
  auto say = [&](const std::string& line) { std::fprintf(stderr, "cela: %s\n", line.c_str()); };
  if (::geteuid() != 0) {
    say("cela run needs root (it creates namespaces, cgroups and id-mapped mounts)");
    return kExitUsage;
  }
  rootfs::TemplateStore store;
  store.root = o.templates_dir;
  auto tmpl = rootfs::load_template(store, o.template_name);
  if (!tmpl) {
    if (tmpl.error().code == ErrorCode::not_found)
      say("unknown template '" + o.template_name + "' (see `cela template ls`; build it with `cela template build " +
          o.template_name + "`)");
    else
      say("template '" + o.template_name + "': " + tmpl.error().message());
    return kExitUsage;
  }
  auto plan = make_plan(o, *tmpl);
  if (!plan) {
    say(plan.error().message());
    return kExitUsage;
  }

  UniqueFd out_file;
  int out_fd = 1, err_fd = 2;
  if (!o.output_file.empty()) {
    out_file.reset(::open(o.output_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!out_file) {
      say("cannot open --output-file " + o.output_file + ": " + std::strerror(errno));
      return kExitUsage;
    }
    out_fd = err_fd = out_file.get();
  } else if (o.json) {
    out_fd = 2;  // stdout carries only the JSON result
  }

  // Blocked before clone, so the sandbox never runs our handlers.
  UniqueFd signal_fd = block_stop_signals();
  RunObservation obs;
  obs.timeout_ms = plan->timeout_ms;
  obs.limits = plan->spec.limits;
  RunResult result;
  Clock::time_point started;
  Clock::time_point ended;
  {
    auto fatal = [&](const Error& e) {
      obs.failure = e.context;
      obs.failure_errno = e.err;
    };
    auto seccomp = cached_seccomp_program();
    auto slot = seccomp ? UidSlot::acquire() : std::unexpected(seccomp.error());
    auto mode = slot ? detect_cgroup_mode() : std::unexpected(slot.error());
    auto cgroups = mode ? open_cgroup_host(*mode) : std::unexpected(mode.error());
    std::unique_ptr<Sandbox> sb;
    if (!cgroups) {
      fatal(cgroups.error());
    } else {
      plan->spec.name = "run-" + std::to_string(slot->index());
      plan->spec.hostname = "cela-" + std::to_string(slot->index());
      plan->spec.host_uid_base = slot->host_base();
      // Runners killed before they could clean up leave their cgroup behind; whoever
      // can lock the dead runner's slot removes it.
      reclaim_stale_runs(**cgroups, *slot);
      if (auto r = (*cgroups)->remove_stale(plan->spec.name); !r) fatal(r.error());
      else if (auto s = Sandbox::start(plan->spec, **cgroups, *seccomp); !s) fatal(s.error());
      else sb = std::move(*s);
    }
    if (sb) {
      started = Clock::now();
      auto ex = sb->exec(plan->exec);
      if (!ex) {
        const Error& e = ex.error();
        obs.failure = e.err == ENOENT && e.context == "execve" ? "command not found: " + o.command[0]
                      : e.context == "execve"                   ? "cannot execute " + o.command[0]
                                                                : "cannot start the command (" + e.context + ")";
        obs.failure_errno = e.context == "execve" && e.err == ENOENT ? 0 : e.err;
        obs.failure_exit_code = e.context == "execve" ? (e.err == ENOENT ? kExitNotFound : kExitCannotExec)
                                                      : kExitFailed;
      } else {
        SandboxOutput out(out_fd, o.raw), err(err_fd, o.raw);
        supervise(*sb, *ex, *plan, out, err, signal_fd.get(), obs);
      }
      ended = Clock::now();
      // Stats are read after every process is gone and before the cgroup is removed.
      sb->kill_and_reap();
      if (auto st = sb->cgroup().stats(); st) obs.stats = *st;
      auto report = sb->destroy();
      if (!report) say("cleanup: " + report.error().message());
    }
    result = classify(obs);
    result.duration_ms = sb ? static_cast<uint64_t>(
                                  std::chrono::duration_cast<std::chrono::milliseconds>(ended - started).count())
                            : 0;
  }
  if (o.json) {
    std::string text = boost::json::serialize(result.to_json()) + "\n";
    write_fd(1, text);
  } else if (result.state != RunState::exited || result.reason.find("limit") != std::string::npos) {
    say(result.reason);
  }
  return exit_code_for(result);
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto opts = std::make_shared<RunOptions>();
  CLI::App* cmd = app.add_subcommand("run", "Run one command in a fresh sandbox and report how it ended");
  cmd->add_option("--template", opts->template_name, "Template to start from (base, host, ...)")
      ->capture_default_str();
  cmd->add_option("--memory", opts->memory, "Memory limit, swap off (e.g. 512m, 2g)")->capture_default_str();
  cmd->add_option("--cpus", opts->cpus, "CPU ceiling in CPUs (e.g. 0.5, 2)")->capture_default_str();
  cmd->add_option("--pids", opts->pids, "Maximum number of processes")->capture_default_str();
  cmd->add_option("--timeout", opts->timeout, "Wall-clock timeout (e.g. 30s, 5m)")->capture_default_str();
  cmd->add_option("--disk", opts->disk, "Size of the writable layer; also the largest file")->capture_default_str();
  // One value per --env: a vector option otherwise keeps taking words, and CLI11 2.1
  // then swallows the `--` that should end the options (`--env K=V -- sh -c ...`
  // failed with "-c not expected").
  cmd->add_option("--env", opts->env, "Environment variable K=V (repeatable)")->allow_extra_args(false);
  cmd->add_option("--user", opts->user, "Run as `user` (uid 1000) or `root` (user-namespace root)")
      ->capture_default_str();
  cmd->add_option("--cwd", opts->cwd, "Working directory inside (default: the user's home)");
  cmd->add_flag("--json", opts->json, "Print the result as one JSON object on stdout (output goes to stderr)");
  cmd->add_option("--output-file", opts->output_file, "Write the command's stdout and stderr to this file");
  cmd->add_flag("--raw", opts->raw,
                "Pass the command's output to a terminal unchanged (by default control sequences are "
                "shown escaped, e.g. \\x1b; pipes and files always get the exact bytes)");
  cmd->add_flag("--allow-sudo", opts->allow_sudo,
                "Turn no_new_privs off so setuid (sudo) reaches user-namespace root (default: as the template says)");
  cmd->add_flag("--no-allow-sudo", opts->no_allow_sudo, "Keep no_new_privs on even if the template ships sudo");
  cmd->add_option("--templates-dir", opts->templates_dir, "Template store")->capture_default_str();
  cmd->add_option("command", opts->command, "CMD [ARGS...] after --")->expected(-1);
  cmd->footer(
      "Exit code: the command's own; 128+N when killed by signal N; 124 timed out; 121 memory limit (OOM); "
      "125 sandbox failure; 126 cannot execute; 127 command not found; 2 bad usage.");
  cmd->callback([opts, &exit_code] { exit_code = run(*opts); });
}

}  // namespace cela::cli
