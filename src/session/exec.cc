// Execs of a session: start, stdin, kill, follow, run, and how each one ends.
// Reactor-only except exec_output() (store and files, on the caller's thread).
#include <signal.h>

#include <boost/asio/post.hpp>
#include <algorithm>
#include <cstdio>

#include "common/fs.h"
#include "common/units.h"
#include "session/exec_env.h"
#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;
using store::ExecRecord;

namespace {
constexpr auto kExecStartTimeout = std::chrono::seconds(10);
// After an exec's main process exits, how long its output pipes may stay open (held
// by background processes it left) before the exec is finished without them.
constexpr auto kOutputLinger = std::chrono::milliseconds(200);

template <class T>
void complete_all(std::vector<Done<T>>& waiters, const Result<T>& result) {
  auto list = std::move(waiters);
  waiters.clear();
  for (auto& w : list) w(result);
}
}  // namespace

// ---- the runtime's events -------------------------------------------------------------

void ExecState::on_started(pid_t pid_inside) {
  record.pid = pid_inside;
  manager.exec_started(*this);
}

void ExecState::on_start_failed(const runtime::StartFailure& failure) {
  observed.start_failure = failure;
  out_eof = err_eof = true;
  manager.exec_finished(*this);
}

void ExecState::on_output(runtime::Stream stream, std::string_view data) {
  if (output) output->capture(stream, data);
}

void ExecState::on_output_end(runtime::Stream stream) {
  (stream == runtime::Stream::stdout_stream ? out_eof : err_eof) = true;
  manager.maybe_finish(*this);
}

void ExecState::on_exited(int wait_status) {
  observed.wait_status = wait_status;
  manager.maybe_finish(*this);
}

ExecRecord ExecState::snapshot() const {
  ExecRecord r = record;
  if (output && !finished) {
    r.stdout_bytes = static_cast<int64_t>(output->total(runtime::Stream::stdout_stream));
    r.stderr_bytes = static_cast<int64_t>(output->total(runtime::Stream::stderr_stream));
    r.output_truncated = output->truncated();
  }
  return r;
}

// ---- start ------------------------------------------------------------------------------

void SessionManager::start_exec(const Caller& caller, const std::string& session_id, ExecSpec spec,
                                Done<ExecRecord> done) {
  on_reactor([this, caller, session_id, spec = std::move(spec), done = std::move(done)]() mutable {
    auto found = find_live(caller, session_id);
    if (!found) return done(std::unexpected(found.error()));
    std::shared_ptr<Session> session = *found;
    Session& s = *session;
    if (!running_or_later(s, [this, caller, session_id, spec, done](Result<void> r) mutable {
          if (!r) return done(std::unexpected(r.error()));
          start_exec(caller, session_id, std::move(spec), std::move(done));
        }))
      return;
    // Errors a client sees never hold a granted value.
    done = [r = s.redactions, done = std::move(done)](Result<ExecRecord> x) {
      if (!x) return done(std::unexpected(redact_error(r.get(), std::move(x.error()))));
      done(std::move(x));
    };
    // The session's exec_timeout_s is a ceiling: an exec may ask for less, never more.
    uint64_t ceiling_ms = s.limits.exec_timeout_s * 1000;
    uint64_t timeout_ms = spec.timeout_ms.value_or(ceiling_ms);
    if (spec.cap_timeout) timeout_ms = std::min(timeout_ms, ceiling_ms);
    if (timeout_ms > ceiling_ms)
      return done(fail(ErrorCode::invalid_argument, "field `timeout_s` is above this session's exec_timeout_s of " +
                                                        std::to_string(s.limits.exec_timeout_s)));
    ExecEnvInput in;
    in.argv = spec.argv;
    in.cmd = spec.cmd;
    in.user = spec.user;
    in.cwd = spec.cwd.empty() ? s.tmpl.workdir : spec.cwd;
    in.base_env = s.tmpl.env;  // the template's (ENV of a build), below the session's
    in.base_env.insert(in.base_env.end(), s.env.begin(), s.env.end());
    // Env grants reach execs started while the grant lives (after the session's env: a
    // grant is not shadowed by it).
    for (const auto& g : s.secrets)
      if (g.live && !g.spec.as_file) in.base_env.push_back(g.spec.env + "=" + g.value.view());
    auto wipe_env = [&](std::vector<std::string>& env) {
      if (s.secrets.empty()) return;
      for (auto& kv : env) wipe_string(kv);
    };
    in.env = spec.env;
    in.allow_sudo = s.allow_sudo;
    in.fsize_bytes = s.limits.disk_mb << 20;
    in.nofile = config_.exec_nofile;
    in.tty = spec.tty;
    in.cols = spec.cols;
    in.rows = spec.rows;
    auto process = process_spec(s.tmpl.user, in);
    wipe_env(in.base_env);
    if (!process) return done(std::unexpected(process.error()));

    auto e = std::make_shared<ExecState>(*this, s);
    ExecRecord& r = e->record;
    r.id = store::new_id("e");
    r.session_id = session_id;
    r.tenant_id = caller.tenant_id;
    auto shown = [&](const std::string& text) { return s.redactions ? s.redactions->redact(text) : text; };
    for (const auto& a : spec.argv) r.argv.push_back(shown(a));
    r.cmd = shown(spec.cmd);
    r.user = spec.user == ExecUser::root ? "root" : "user";
    r.cwd = shown(process->cwd);
    r.started_at = store::now_rfc3339();
    e->timeout_ms = timeout_ms;
    for (const auto& kv : spec.env) e->env.push_back(shown(kv));
    e->tag = spec.tag;
    e->tty = spec.tty;
    e->observed.timeout_ms = timeout_ms;
    e->observed.command = r.argv.empty() ? r.cmd : r.argv[0];
    e->observed.limits = {s.limits.memory_mb << 20, s.limits.cpus, s.limits.pids};
    e->close_stdin_after = !spec.stdin_open;
    // Recorded first: an exec the store cannot take is never started.
    if (auto ins = store_.insert_exec(r); !ins) return done(std::unexpected(ins.error()));
    observe_exec_starting(*e);
    std::shared_ptr<OutputFilter> filter;
    if (s.redactions && !s.redactions->empty()) filter = std::make_shared<RedactingFilter>(s.redactions);
    e->output = std::make_unique<OutputPipeline>(reactor_, output_dir_, r.id, config_.output_cap_bytes, filter);
    auto started = s.instance->exec(*process, *e);
    wipe_env(process->env);
    // Its audit record is written while init starts it (the reactor would wait then),
    // in this turn: before anything the exec itself makes the daemon record.
    observe_exec_started(*e, spec);
    e->pending_stdin = std::move(spec.stdin_text);
    if (!started) {
      e->observed.start_failure = runtime::StartFailure{runtime::ExecStep::request, started.error().err};
      s.execs[r.id] = e;
      e->out_eof = e->err_eof = true;
      exec_finished(*e);
      return done(std::unexpected(started.error()));
    }
    e->exec = std::move(*started);
    e->on_start.push_back(std::move(done));
    s.execs[r.id] = e;
    s.last_activity = Clock::now();
    arm_session_timer(session);
    arm_exec_start_timer(session, e, kExecStartTimeout);
  });
}

void SessionManager::arm_exec_start_timer(const std::shared_ptr<Session>& session, const std::shared_ptr<ExecState>& e,
                                          Clock::duration after) {
  assert_on_reactor();
  e->start_timer = std::make_unique<asio::steady_timer>(reactor_, after);
  e->start_timer->async_wait([this, session, e](boost::system::error_code ec) {
    if (ec || e->started || e->finished) return;
    complete_all(e->on_start, Result<ExecRecord>(fail(ErrorCode::internal, "the session's init did not start exec " +
                                                                               e->record.id + " in time")));
    terminate(session, "failed", "init_died", "init stopped answering");
  });
}

void SessionManager::arm_exec_timeout(ExecState& e, Clock::duration after) {
  assert_on_reactor();
  e.timeout = std::make_unique<asio::steady_timer>(reactor_, after);
  e.timeout->async_wait([&e](boost::system::error_code ec) {
    if (ec || e.finished || e.observed.wait_status) return;
    e.observed.timed_out = true;
    if (e.exec) (void)e.exec->kill_tree();
  });
}

void SessionManager::exec_started(ExecState& e) {
  assert_on_reactor();
  e.started = true;
  e.started_at = Clock::now();
  if (e.start_timer) e.start_timer->cancel();
  if (!e.pending_stdin.empty()) e.exec->write_stdin(std::move(e.pending_stdin), [](Result<void>) {});
  e.pending_stdin.clear();
  if (e.close_stdin_after) e.exec->close_stdin();
  if (e.timeout_ms > 0) {
    // Started while the session is being paused: the timeout begins at the resume.
    if (e.session.freeze == Session::Freeze::running) arm_exec_timeout(e, std::chrono::milliseconds(e.timeout_ms));
    else e.timeout_left = std::chrono::milliseconds(e.timeout_ms);
  }
  ExecRecord running = e.snapshot();
  complete_all(e.on_start, Result<ExecRecord>(running));
}

void SessionManager::maybe_finish(ExecState& e) {
  assert_on_reactor();
  if (e.finished || !e.observed.wait_status) return;
  if (e.out_eof && e.err_eof) return exec_finished(e);
  if (!e.linger) {
    // Background processes hold the pipes: finish without them shortly.
    e.linger = std::make_unique<asio::steady_timer>(reactor_, kOutputLinger);
    e.linger->async_wait([this, &e](boost::system::error_code ec) {
      if (ec) return;
      if (e.exec) e.exec->stop_output();
      exec_finished(e);
    });
  }
}

// Everything that ends an exec funnels here.
void SessionManager::exec_finished(ExecState& e) {
  assert_on_reactor();
  if (e.finished) return;
  e.finished = true;
  for (auto* t : {e.start_timer.get(), e.timeout.get(), e.grace.get(), e.linger.get()})
    if (t) t->cancel();
  if (e.exec) {
    e.exec->stop_output();
    e.exec->drop_stdin(Error{ErrorCode::conflict, 0, "exec " + e.record.id + " has ended"});
    if (auto st = e.exec->stats(); st) e.observed.stats = *st;
  }
  observe_exec_limits(e);
  ExecRecord& r = e.record;
  // What the redactor held back (a possible prefix of a secret) is kept now.
  e.output->flush_filter();
  classify_exec(e.observed, r);
  if (e.session.redactions) r.reason = e.session.redactions->redact(r.reason);
  r.ended_at = store::now_rfc3339();
  r.duration_ms = e.started ? std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - e.started_at).count()
                            : 0;
  r.cpu_ms = static_cast<int64_t>(e.observed.stats.cpu_usage_ns / 1'000'000);
  r.peak_memory_bytes = static_cast<int64_t>(e.observed.stats.memory_peak_bytes);
  if (e.observed.stats.pids_peak > 0) r.pids_peak = static_cast<int64_t>(e.observed.stats.pids_peak);
  r.stdout_bytes = static_cast<int64_t>(e.output->total(runtime::Stream::stdout_stream));
  r.stderr_bytes = static_cast<int64_t>(e.output->total(runtime::Stream::stderr_stream));
  r.output_truncated = e.output->truncated();
  r.partial = (r.stdout_bytes + r.stderr_bytes) > 0 && r.state != "exited";
  if (const auto& w = e.output->write_error())
    std::fprintf(stderr, "cela: output of %s is short: %s\n", r.id.c_str(), w->message().c_str());
  // The record is final in the store before anyone is told: the output index with it
  // (one transaction), so a finished record always finds its output.
  std::vector<store::OutputRecord> outputs;
  for (auto stream : {runtime::Stream::stdout_stream, runtime::Stream::stderr_stream}) {
    std::string path = e.output->path(stream);
    if (path.empty()) continue;
    outputs.push_back({r.id, std::string(runtime::to_string(stream)), path,
                       static_cast<int64_t>(e.output->kept(stream)), r.output_truncated});
  }
  bool recorded = true;
  if (auto f = store_.finish_exec(r, outputs); !f) {
    recorded = false;
    // Nothing of it was written (state dir full): the index now, the record retried.
    for (const auto& o : outputs) (void)store_.set_output(o);
    pending_execs_[r.session_id].push_back(r), retry_unrecorded();
  }
  e.output->finish(r);
  // Limits it hit are recorded before the answer (a client reads them next).
  observe_exec_limits_hit(e);
  // The idle timeout counts from the end of the last exec.
  e.session.last_activity = Clock::now();
  if (!e.session.ended)
    if (auto it = sessions_.find(e.session.record.id); it != sessions_.end()) arm_session_timer(it->second);
  complete_all(e.on_start, Result<ExecRecord>(r));
  complete_all(e.on_end, Result<ExecRecord>(r));
  // After the answer, in this turn (so before whatever the reactor does next): the
  // exec.end audit record, metrics, and the cgroup, which goes once its last process
  // has (background processes it left keep it; they end with the session).
  observe_exec_ended(e);
  bool released = !e.exec || e.exec->release_if_empty();
  // From here on its record and output are the store's. An exec whose processes all
  // ended is forgotten (its output files close with it): a session that runs execs
  // for days holds only the running ones and those whose background processes live.
  if (released && recorded) forget_exec_later(e);
}

void SessionManager::forget_exec_later(const ExecState& e) {
  assert_on_reactor();
  // Not now: the caller may be inside the exec's own callback (on_exited).
  asio::post(reactor_, [this, session_id = e.session.record.id, exec_id = e.record.id] {
    auto s = sessions_.find(session_id);
    if (s == sessions_.end()) return;
    auto& execs = s->second->execs;
    if (auto it = execs.find(exec_id); it != execs.end() && it->second->finished) execs.erase(it);
  });
}

// ---- lookups ----------------------------------------------------------------------------

Result<std::shared_ptr<ExecState>> SessionManager::find_exec(const Caller& caller, const std::string& session_id,
                                                             const std::string& exec_id) {
  auto found = find_live(caller, session_id);
  if (!found) return std::unexpected(found.error());
  auto it = (*found)->execs.find(exec_id);
  if (it == (*found)->execs.end()) return fail(ErrorCode::not_found, "no exec " + exec_id + " in this session");
  return it->second;
}

Error SessionManager::not_live_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                                    Error why) {
  assert_on_reactor();
  if (why.code != ErrorCode::not_found || !store_.get_exec(caller.tenant_id, session_id, exec_id)) return why;
  return Error{ErrorCode::conflict, 0, "exec " + exec_id + " has ended"};
}

void SessionManager::get_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                              Done<ExecRecord> done) {
  on_reactor([this, caller, session_id, exec_id, done = std::move(done)] {
    if (auto e = find_exec(caller, session_id, exec_id); e) return done((*e)->snapshot());
    auto rec = store_.get_exec(caller.tenant_id, session_id, exec_id);
    if (!rec) return done(fail(ErrorCode::not_found, "no exec " + exec_id + " in session " + session_id));
    done(*rec);
  });
}

Result<ExecOutput> SessionManager::exec_output(const Caller& caller, const std::string& session_id,
                                               const std::string& exec_id) {
  auto rec = store_.get_exec(caller.tenant_id, session_id, exec_id);
  if (!rec) return fail(ErrorCode::not_found, "no exec " + exec_id + " in session " + session_id);
  if (rec->state == "running") return fail(ErrorCode::conflict, "exec " + exec_id + " is still running (use ?follow=1)");
  auto files = store_.get_output(exec_id);
  if (!files) return std::unexpected(files.error());
  ExecOutput out;
  out.truncated = rec->output_truncated;
  auto o = read_stored(*files, runtime::Stream::stdout_stream);
  if (!o) return std::unexpected(o.error());
  auto e = read_stored(*files, runtime::Stream::stderr_stream);
  if (!e) return std::unexpected(e.error());
  out.stdout_data = std::move(*o);
  out.stderr_data = std::move(*e);
  return out;
}

void SessionManager::follow_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                                 uint64_t stdout_from, uint64_t stderr_from, std::shared_ptr<OutputSink> sink,
                                 Done<void> done) {
  on_reactor([=, this, done = std::move(done)] {
    if (auto e = find_exec(caller, session_id, exec_id); e) {
      done({});
      if ((*e)->finished) {
        auto files = store_.get_output(exec_id);
        replay_stored(reactor_, files ? *files : std::vector<store::OutputRecord>{}, stdout_from, stderr_from,
                      (*e)->record, sink);
      } else {
        (*e)->output->follow(stdout_from, stderr_from, sink);
      }
      return;
    }
    auto rec = store_.get_exec(caller.tenant_id, session_id, exec_id);
    if (!rec) return done(fail(ErrorCode::not_found, "no exec " + exec_id + " in session " + session_id));
    auto files = store_.get_output(exec_id);
    if (!files) return done(std::unexpected(files.error()));
    done({});
    replay_stored(reactor_, *files, stdout_from, stderr_from, *rec, sink);
  });
}

void SessionManager::live_execs(const Caller& caller, const std::string& session_id,
                                Done<std::vector<LiveExec>> done) {
  on_reactor([=, this, done = std::move(done)] {
    auto found = find_live(caller, session_id);
    if (!found) return done(std::unexpected(found.error()));
    std::vector<LiveExec> out;
    for (const auto& [id, e] : (*found)->execs) {
      if (e->finished || !e->started) continue;
      out.push_back({e->snapshot(), e->env, e->tag, e->tty, e->output->kept(runtime::Stream::stdout_stream),
                     e->output->kept(runtime::Stream::stderr_stream)});
    }
    std::sort(out.begin(), out.end(),
              [](const LiveExec& a, const LiveExec& b) { return a.record.started_at < b.record.started_at; });
    done(std::move(out));
  });
}

// ---- stdin, kill, run -------------------------------------------------------------------

void SessionManager::write_stdin(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                                 std::string data, bool close, Done<void> done) {
  on_reactor([=, this, data = std::move(data), done = std::move(done)]() mutable {
    auto found = find_exec(caller, session_id, exec_id);
    if (!found) return done(std::unexpected(not_live_exec(caller, session_id, exec_id, found.error())));
    std::shared_ptr<ExecState> e = *found;
    if (e->finished) return done(fail(ErrorCode::conflict, "exec " + exec_id + " has ended"));
    if (!running_or_later(e->session, [this, caller, session_id, exec_id, data, close, done](Result<void> r) mutable {
          if (!r) return done(std::unexpected(r.error()));
          write_stdin(caller, session_id, exec_id, std::move(data), close, std::move(done));
        }))
      return;
    if (!e->exec || e->close_stdin_after || e->stdin_closed)
      return done(fail(ErrorCode::conflict, "stdin of exec " + exec_id + " is closed"));
    e->session.last_activity = Clock::now();
    if (close) e->stdin_closed = true;
    if (data.empty()) {
      if (close) e->exec->close_stdin();
      return done({});
    }
    // Answered once the process has taken the bytes, or at the bound: a process that
    // never reads costs a timer, not a thread.
    auto shared_done = std::make_shared<Done<void>>(std::move(done));
    auto timer = std::make_shared<asio::steady_timer>(reactor_, std::chrono::seconds(config_.stdin_timeout_s));
    size_t bytes = data.size();
    e->exec->write_stdin(std::move(data), [shared_done, timer](Result<void> r) {
      timer->cancel();
      if (*shared_done) std::exchange(*shared_done, nullptr)(std::move(r));
    });
    if (close) e->exec->close_stdin();
    timer->async_wait([this, e, shared_done, bytes, exec_id](boost::system::error_code ec) {
      if (ec || !*shared_done) return;
      auto answer = std::exchange(*shared_done, nullptr);
      Error why{ErrorCode::limit, 0,
                "exec " + exec_id + " did not read " + std::to_string(bytes) + " bytes of stdin within " +
                    std::to_string(config_.stdin_timeout_s) + " s; the unread input was dropped"};
      if (e->exec) e->exec->drop_stdin(why);
      answer(std::unexpected(Error{ErrorCode::conflict, 0, why.context}));
    });
  });
}

void SessionManager::kill_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                               KillSpec spec, Done<ExecRecord> done) {
  on_reactor([=, this, done = std::move(done)] {
    auto found = find_exec(caller, session_id, exec_id);
    if (!found) {
      // Ended and forgotten: killing it again answers its final record, as before.
      if (found.error().code == ErrorCode::not_found)
        if (auto rec = store_.get_exec(caller.tenant_id, session_id, exec_id)) return done(*rec);
      return done(std::unexpected(found.error()));
    }
    std::shared_ptr<ExecState> e = *found;
    if (e->finished || !e->exec) return done(e->record);
    if (!running_or_later(e->session, [this, caller, session_id, exec_id, spec, done](Result<void> r) mutable {
          if (!r) return done(std::unexpected(r.error()));
          kill_exec(caller, session_id, exec_id, spec, std::move(done));
        }))
      return;
    e->observed.kill_signal = spec.signal;
    if (spec.signal == SIGKILL || spec.grace.count() <= 0) {
      (void)e->exec->kill_tree();
    } else {
      (void)e->exec->signal_tree(spec.signal);
      e->grace = std::make_unique<asio::steady_timer>(reactor_, spec.grace);
      e->grace->async_wait([e](boost::system::error_code ec) {
        if (ec || e->finished || !e->exec) return;
        (void)e->exec->kill_tree();
      });
    }
    done(e->snapshot());
  });
}

void SessionManager::resize_exec(const Caller& caller, const std::string& session_id, const std::string& exec_id,
                                 uint16_t cols, uint16_t rows, Done<void> done) {
  on_reactor([=, this, done = std::move(done)] {
    auto found = find_exec(caller, session_id, exec_id);
    if (!found) return done(std::unexpected(not_live_exec(caller, session_id, exec_id, found.error())));
    std::shared_ptr<ExecState> e = *found;
    if (e->finished || !e->exec) return done(fail(ErrorCode::conflict, "exec " + exec_id + " has ended"));
    // A paused session's processes take the SIGWINCH once thawed: no need to wait here.
    if (auto r = e->exec->resize(cols, rows); !r) return done(std::unexpected(r.error()));
    done({});
  });
}

void SessionManager::run(const Caller& caller, const std::string& session_id, ExecSpec spec, Done<RunOutcome> done) {
  start_exec(caller, session_id, std::move(spec),
             [this, caller, session_id, done = std::move(done)](Result<ExecRecord> started) mutable {
               if (!started) return done(std::unexpected(started.error()));
               auto e = find_exec(caller, session_id, started->id);
               auto outcome = [](const ExecState& x) {
                 RunOutcome o{x.record, std::nullopt};
                 if (auto small = x.output->small_output())
                   o.output = ExecOutput{std::move(small->first), std::move(small->second), x.record.output_truncated};
                 return o;
               };
               if (e && (*e)->finished) return done(outcome(**e));
               if (!e) {
                 // Ended with its session already: the stored record is final.
                 auto rec = store_.get_exec(caller.tenant_id, session_id, started->id);
                 return done(RunOutcome{rec ? *rec : *started, std::nullopt});
               }
               std::shared_ptr<ExecState> ex = *e;
               ex->on_end.push_back([ex, outcome, done = std::move(done)](Result<ExecRecord> rec) {
                 if (!rec) return done(std::unexpected(rec.error()));
                 done(outcome(*ex));
               });
             });
}

}  // namespace cela::session
