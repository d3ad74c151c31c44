#include "cli/run_cmd.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json.hpp>
#include <algorithm>
#include <array>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>

#include "cli/raw_terminal.h"
#include "cli/run_registry.h"
#include "cli/sandbox_output.h"
#include "cli/stop_signals.h"
#include "common/units.h"
#include "common/fs.h"
#include "rootfs/template.h"
#include "runtime/jail.h"
#include "runtime/outcome.h"
#include "session/admission.h"
#include "session/exec_env.h"

namespace cela::cli {
namespace {

using namespace cela::runtime;
namespace asio = boost::asio;
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
  bool tty = false;          // -t: on a pty, our terminal in raw mode
  bool interactive = false;  // -i: stdin is forwarded anyway; accepted as docker's
  std::string templates_dir = "/var/lib/cela/templates";
  std::string ledger_dir = "/run/cela/grants";  // "" = no host-wide admission
  std::vector<std::string> command;
};

// The host's admission tables are full (sysexits.h EX_TEMPFAIL: try again later).
constexpr int kExitTempFail = 75;

// A usage error: one line on stderr, exit code 2.
struct UsageError {
  std::string message;
};

struct Plan {
  runtime::InstanceSpec spec;
  runtime::ProcessSpec process;
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
  p.spec.disk_bytes = *disk;
  // A one-shot run keeps its writable layer in a tmpfs (no disk pool outside a daemon).
  p.spec.disk_kind = runtime::DiskKind::memory;
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
  in.tty = o.tty;
  if (auto size = terminal_size(1) ? terminal_size(1) : terminal_size(0)) {
    in.cols = std::min<uint16_t>(size->first, 1000);
    in.rows = std::min<uint16_t>(size->second, 1000);
  }
  for (const auto& kv : o.env) {
    auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0)
      return fail(ErrorCode::invalid_argument, "bad --env '" + kv + "' (want K=V)");
    in.env.push_back(kv);
  }
  auto process = session::process_spec(tmpl.user, in);
  if (!process) return std::unexpected(process.error());
  p.process = std::move(*process);
  return p;
}

// Our stdin on its way to the command's, never holding up the command's output, the
// timeout or a stop signal. fd 0 may be a terminal or pipe shared with the caller's
// shell, or a regular file: it is neither made non-blocking nor polled. A thread copies
// it with blocking reads into a pipe of ours, whose read end the reactor watches. The
// pipe is the backpressure: once kMaxPending bytes wait for the command the reactor
// stops reading it, the pipe fills and the thread blocks.
class StdinForward {
 public:
  static constexpr size_t kMaxPending = 1 << 20;

  StdinForward(asio::io_context& reactor, runtime::Exec& exec) : reader_(reactor), exec_(exec) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      exec_.close_stdin();
      return;
    }
    reader_.assign(fds[0]);
    reader_.non_blocking(true);
    std::thread([to = UniqueFd(fds[1])] {
      char buf[65536];
      for (;;) {
        ssize_t n = ::read(0, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;  // EOF reaches the command when `to` closes
        for (ssize_t done = 0; done < n;) {
          ssize_t w = ::write(to.get(), buf + done, static_cast<size_t>(n - done));
          if (w < 0 && errno == EINTR) continue;
          if (w < 0) return;  // EPIPE: we stopped forwarding
          done += w;
        }
      }
    }).detach();  // blocked in read(0) at most; it ends with the process
    read_more();
  }

  // The command is gone: stop forwarding (the thread's next write fails).
  void close() {
    closed_ = true;
    boost::system::error_code ignored;
    reader_.close(ignored);
  }

 private:
  void read_more() {
    if (closed_ || reading_ || exec_.stdin_backlog() >= kMaxPending) return;
    reading_ = true;
    reader_.async_read_some(asio::buffer(buf_), [this](boost::system::error_code ec, size_t n) {
      reading_ = false;
      if (closed_) return;
      if (ec) {  // EOF (or a broken pipe of ours): the command gets EOF once it has the rest
        exec_.close_stdin();
        return;
      }
      exec_.write_stdin(std::string(buf_.data(), n), [this](Result<void> r) {
        if (!r) close();  // EPIPE: the command closed its stdin
        else read_more();
      });
      read_more();
    });
  }

  asio::posix::stream_descriptor reader_;
  runtime::Exec& exec_;
  std::array<char, 65536> buf_{};
  bool reading_ = false, closed_ = false;
};

// Runs one exec to its end on `reactor`: streams output, forwards stdin, enforces the
// timeout, stops on SIGTERM/SIGINT. Ends the exec's process tree when its main process
// ends, so processes it left in the background cannot hold the output open.
class Supervisor final : public runtime::ExecListener {
 public:
  Supervisor(asio::io_context& reactor, const RunOptions& o, const Plan& plan, SandboxOutput& out,
             SandboxOutput& err, UniqueFd& signal_fd, const UniqueFd& winch_fd, RunObservation& obs)
      : reactor_(reactor), o_(o), out_(out), err_(err), obs_(obs), timer_(reactor), signals_(reactor), winch_(reactor) {
    if (winch_fd) {
      winch_.assign(::fcntl(winch_fd.get(), F_DUPFD_CLOEXEC, 3));
      watch_winch();
    }
    timer_.expires_after(std::chrono::milliseconds(plan.timeout_ms));
    timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || ended_) return;
      obs_.timed_out = true;
      stop();
    });
    signals_.assign(::fcntl(signal_fd.get(), F_DUPFD_CLOEXEC, 3));
    signals_.async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
      if (ec || ended_) return;
      signalfd_siginfo si{};
      if (::read(signals_.native_handle(), &si, sizeof si) == sizeof si)
        obs_.runner_signal = static_cast<int>(si.ssi_signo);
      stop();
    });
  }

  // Starts the command; false when it could not even be asked for (obs says why).
  bool start(runtime::Instance& instance, const runtime::ProcessSpec& process) {
    instance.attach(reactor_, [this](std::string) {
      obs_.failure = "the sandbox's init died";
      stop();
    });
    auto ex = instance.exec(process, *this);
    if (!ex) {
      obs_.failure = "cannot start the command (" + ex.error().context + ")";
      obs_.failure_errno = ex.error().err;
      return false;
    }
    exec_ = std::move(*ex);
    started_at_ = Clock::now();
    return true;
  }

  // Wall time from the request to start to the end of the command.
  uint64_t duration_ms() const {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(ended_at_ - started_at_).count());
  }

  // The command's accounting (its own cgroup: where the kernel counts its OOM kills),
  // once its processes are gone.
  std::optional<runtime::Stats> stats() const {
    if (!exec_) return std::nullopt;
    auto st = exec_->stats();
    return st ? std::optional(*st) : std::nullopt;
  }

  void on_started(pid_t) override { input_ = std::make_unique<StdinForward>(reactor_, *exec_); }
  void on_start_failed(const runtime::StartFailure& f) override {
    bool execve = f.step == runtime::ExecStep::execve;
    obs_.failure = execve && f.err == ENOENT ? "command not found: " + o_.command[0]
                   : execve                  ? "cannot execute " + o_.command[0]
                                             : "cannot start the command (" + std::string(to_string(f.step)) + ")";
    obs_.failure_errno = execve && f.err == ENOENT ? 0 : f.err;
    obs_.failure_exit_code = execve ? (f.err == ENOENT ? kExitNotFound : kExitCannotExec) : kExitFailed;
    streams_open_ = 0;  // no output will come
    stop();
  }
  void on_output(runtime::Stream stream, std::string_view data) override {
    (stream == runtime::Stream::stdout_stream ? out_ : err_).write(data);
  }
  void on_output_end(runtime::Stream stream) override {
    (stream == runtime::Stream::stdout_stream ? out_ : err_).finish();
    if (streams_open_ > 0) --streams_open_;
    finish_if_done();
  }
  void on_exited(int wait_status) override {
    obs_.wait_status = wait_status;
    stop();
  }

 private:
  // The command's end, for whatever reason: nothing more is forwarded, its processes
  // are killed, and the run is over once both output streams have ended (or a grace
  // period passed: the sandbox's teardown kills whatever still holds them).
  void stop() {
    if (ended_) return;
    ended_ = true;
    ended_at_ = Clock::now();
    if (input_) input_->close();
    if (exec_) (void)exec_->kill_tree();
    timer_.cancel();
    boost::system::error_code ignored;
    signals_.close(ignored);
    winch_.close(ignored);
    timer_.expires_after(std::chrono::seconds(5));
    timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) reactor_.stop();
    });
    finish_if_done();
  }

  void finish_if_done() {
    if (ended_ && streams_open_ == 0) reactor_.stop();
  }

  // Our terminal changed size: so does the command's.
  void watch_winch() {
    winch_.async_wait(asio::posix::stream_descriptor::wait_read, [this](boost::system::error_code ec) {
      if (ec || ended_) return;
      signalfd_siginfo si{};
      while (::read(winch_.native_handle(), &si, sizeof si) == sizeof si) {
      }
      if (auto size = terminal_size(1) ? terminal_size(1) : terminal_size(0); size && exec_)
        (void)exec_->resize(std::min<uint16_t>(size->first, 1000), std::min<uint16_t>(size->second, 1000));
      watch_winch();
    });
  }

  asio::io_context& reactor_;
  const RunOptions& o_;
  SandboxOutput &out_, &err_;
  RunObservation& obs_;
  asio::steady_timer timer_;
  asio::posix::stream_descriptor signals_, winch_;
  // The exec goes first: its stdin queue's completions, run as it is dropped, still
  // find the forwarder.
  std::unique_ptr<StdinForward> input_;
  std::unique_ptr<runtime::Exec> exec_;
  int streams_open_ = 2;
  bool ended_ = false;
  Clock::time_point started_at_ = Clock::now(), ended_at_ = started_at_;
};

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

  // The jail's memory, pids and open files, taken from the host-wide ledger before it
  // starts and given back once it is gone (`admission` outlives the sandbox).
  std::optional<session::LocalAdmission> admission;
  session::HeldGrant held;
  if (!o.ledger_dir.empty()) {
    auto local = session::LocalAdmission::open(o.ledger_dir);
    if (!local) {
      say("host admission ledger " + o.ledger_dir + ": " + local.error().message());
      return kExitFailed;
    }
    admission = std::move(*local);
    uint64_t memory_mb = (plan->spec.limits.memory_bytes + (1 << 20) - 1) >> 20;
    auto grant = session::HostGrant::of(memory_mb, plan->spec.limits.pids, plan->process.nofile);
    auto h = session::HeldGrant::take(*admission->ledger, grant, admission->limit);
    if (!h) {
      say(h.error().message() + "; try again later");
      return kExitTempFail;
    }
    held = std::move(*h);
  }

  // Blocked before clone, so the sandbox never runs our handlers.
  UniqueFd signal_fd = block_stop_signals();
  UniqueFd winch_fd = o.tty ? block_winch() : UniqueFd();
  RunObservation obs;
  obs.timeout_ms = plan->timeout_ms;
  obs.limits = plan->spec.limits;
  RunResult result;
  {
    auto fatal = [&](const Error& e) {
      obs.failure = e.context;
      obs.failure_errno = e.err;
    };
    // The sandbox is named after this runner; its start claims a host uid slot.
    plan->spec.name = own_run_name();
    RunRecord record(plan->spec.name);
    plan->spec.hostname = "cela-run";
    asio::io_context reactor;
    std::unique_ptr<runtime::Instance> instance;
    auto backend = runtime::open_jail_backend({});
    if (!backend) {
      fatal(backend.error());
    } else {
      reclaim_stale_runs(**backend, plan->spec.name);
      if (auto s = (*backend)->start(plan->spec); !s) fatal(s.error());
      else instance = std::move(*s);
    }
    uint64_t duration_ms = 0;
    if (instance) {
      // A terminal gets the command's terminal output as it is: the command drives it.
      SandboxOutput out(out_fd, o.raw || o.tty), err(err_fd, o.raw || o.tty);
      {
        // Raw until the command has ended (the stop signals are read from signalfds,
        // so this scope is left normally on them too).
        std::optional<RawTerminal> raw_mode;
        if (o.tty) raw_mode.emplace(0);
        Supervisor supervisor(reactor, o, *plan, out, err, signal_fd, winch_fd, obs);
        if (supervisor.start(*instance, plan->process)) reactor.run();
        duration_ms = supervisor.duration_ms();
        if (auto st = supervisor.stats()) obs.stats = *st;
      }
      auto report = instance->destroy();
      if (!report.error.empty()) {
        say("cleanup: " + report.error);
        record.keep();  // for the next runner to finish
      }
    }
    result = classify(obs);
    result.duration_ms = duration_ms;
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
  cmd->add_flag("-t,--tty", opts->tty,
                "Run the command on a terminal (TERM=xterm-256color, our window size, resized with it); this "
                "terminal is in raw mode until it ends, so Ctrl-C goes to the command");
  cmd->add_flag("-i,--interactive", opts->interactive, "Accepted as with docker run -it: stdin is always forwarded");
  cmd->add_flag("--allow-sudo", opts->allow_sudo,
                "Turn no_new_privs off so setuid (sudo) reaches user-namespace root (default: as the template says)");
  cmd->add_flag("--no-allow-sudo", opts->no_allow_sudo, "Keep no_new_privs on even if the template ships sudo");
  cmd->add_option("--templates-dir", opts->templates_dir, "Template store")->capture_default_str();
  cmd->add_option("--ledger-dir", opts->ledger_dir,
                  "Host-wide admission ledger shared with cela daemons and builds (\"\" = none)")
      ->envname("CELA_LEDGER_DIR")
      ->capture_default_str();
  cmd->add_option("command", opts->command, "CMD [ARGS...] after --")->expected(-1);
  cmd->footer(
      "Exit code: the command's own; 128+N when killed by signal N; 124 timed out; 121 memory limit (OOM); "
      "125 sandbox failure; 126 cannot execute; 127 command not found; 2 bad usage; 75 the host's admission "
      "tables are full (other cela processes hold them: try again later).");
  cmd->callback([opts, &exit_code] { exit_code = run(*opts); });
}

}  // namespace cela::cli
