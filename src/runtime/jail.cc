#include "runtime/jail.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <atomic>
#include <cassert>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <variant>

#include "common/fs.h"
#include "common/token_bucket.h"
#include "jail/cgroup.h"
#include "jail/exec_notify.h"
#include "jail/file_writer.h"
#include "jail/init_process.h"
#include "jail/processes.h"
#include "jail/sandbox.h"
#include "jail/seccomp.h"
#include "jail/userns.h"

namespace cela::runtime {
namespace asio = boost::asio;

std::string_view to_string(Stream stream) { return stream == Stream::stdout_stream ? "stdout" : "stderr"; }

namespace {

using Descriptor = asio::posix::stream_descriptor;

// Sandboxes of one backend that hold a spare exec cgroup at once (JailInstance).
constexpr int kMaxSpares = 256;

// The seccomp notifications (execs, violations) the reactor takes from one sandbox: a
// second's worth of a busy build's execs and more, bounded so one sandbox's tight loop
// of denied syscalls costs the reactor a few percent at most (arm_notify).
constexpr double kNotificationsPerSecond = 2000, kNotificationBurst = 200;

// An Asio watch on a descriptor someone else owns (the sandbox's control socket,
// pidfd and execve listener): it never closes the descriptor, so watching costs no
// duplicate (three descriptors per idle session) and cannot fail for want of one.
struct ReleaseOnly {
  void operator()(Descriptor* d) const {
    if (d->is_open()) d->release();
    delete d;
  }
};
using Watch = std::unique_ptr<Descriptor, ReleaseOnly>;

// One exec of a jail: its cgroup, stdin writer and the two output readers.
class JailExec final : public Exec {
 public:
  JailExec(asio::io_context& reactor, std::unique_ptr<jail::Cgroup> cgroup, ExecListener& listener, bool tty)
      : reactor_(reactor), cgroup_(std::move(cgroup)), listener_(listener), tty_(tty) {}
  ~JailExec() override {
    stop_output();
    drop_stdin(Error{ErrorCode::gone, 0, "the exec has ended"});
    stdin_.reset();
  }

  void started(UniqueFd in, UniqueFd out, UniqueFd err) {
    // A tty exec's stdin is the pty master: a copy of it outlives close_stdin, for resize.
    if (tty_) master_ = UniqueFd(::fcntl(in.get(), F_DUPFD_CLOEXEC, 3));
    stdin_ = std::make_unique<Descriptor>(reactor_, in.release());
    stdin_->non_blocking(true);
    read(Stream::stdout_stream, std::move(out));
    read(Stream::stderr_stream, std::move(err));
  }

  void write_stdin(std::string data, std::function<void(Result<void>)> done) override {
    if (!stdin_ || closing_) {
      done(fail(ErrorCode::conflict, "stdin is closed"));
      return;
    }
    backlog_ += data.size();
    queue_.push_back({std::move(data), std::move(done)});
    if (!writing_) write_next();
  }

  void close_stdin() override {
    closing_ = true;
    if (queue_.empty() && !writing_) stdin_.reset();
  }

  size_t stdin_backlog() const override { return backlog_; }

  void drop_stdin(const Error& why) override {
    auto pending = std::move(queue_);
    queue_.clear();
    backlog_ = 0;
    ++generation_;  // the write in flight, if any, belongs to what is dropped
    if (stdin_) stdin_->cancel();
    for (auto& p : pending)
      if (p.done) p.done(std::unexpected(why));
  }

  Result<void> signal_tree(int sig) override { return cgroup_ ? cgroup_->signal_all(sig) : Result<void>{}; }
  Result<void> kill_tree() override { return cgroup_ ? cgroup_->kill_all() : Result<void>{}; }
  Result<jail::CgroupStats> stats() const override {
    if (!cgroup_) return fail(ErrorCode::gone, "the exec's cgroup is gone");
    return cgroup_->stats();
  }
  void stop_output() override {
    for (auto& d : readers_)
      if (d) d->cancel(), d.reset();
    if (tty_) {
      // Every copy of the master goes: the pty returns to the session's devpts (max=).
      drop_stdin(Error{ErrorCode::gone, 0, "the exec has ended"});
      stdin_.reset();
      master_.reset();
    }
  }
  Result<void> resize(uint16_t cols, uint16_t rows) override {
    if (!tty_) return fail(ErrorCode::conflict, "the exec has no tty");
    if (!master_) return fail(ErrorCode::conflict, "the exec's tty is not open");
    winsize size{};
    size.ws_col = cols;
    size.ws_row = rows;
    if (::ioctl(master_.get(), TIOCSWINSZ, &size) != 0) return sys_fail("resize the exec's tty");
    return {};
  }
  bool release_if_empty() override { return take_if_empty() != nullptr || !cgroup_; }
  // The exec's cgroup once none of its processes is left (null while some are, or
  // when it is already gone): the caller removes it.
  std::unique_ptr<jail::Cgroup> take_if_empty() {
    if (!cgroup_) return nullptr;
    auto pop = cgroup_->populated();
    if (!pop || *pop) return nullptr;
    return std::move(cgroup_);
  }
  // The session's cgroup removal takes the children first.
  void forget_cgroup() { cgroup_.reset(); }

 private:
  struct Pending {
    std::string data;
    std::function<void(Result<void>)> done;
  };

  // One write at a time, front of the queue first. A write whose queue was dropped
  // meanwhile (its generation passed) completes without touching the new queue.
  void write_next() {
    if (queue_.empty() || !stdin_ || writing_) return;
    writing_ = true;
    auto& front = queue_.front();
    asio::async_write(*stdin_, asio::buffer(front.data),
                      [this, alive = alive_, generation = generation_](boost::system::error_code ec, size_t) {
                        if (!*alive) return;
                        writing_ = false;
                        if (generation != generation_) {
                          if (queue_.empty() && closing_) stdin_.reset();
                          else write_next();
                          return;
                        }
                        Pending p = std::move(queue_.front());
                        queue_.pop_front();
                        backlog_ -= p.data.size();
                        if (ec) {
                          Error e{ErrorCode::conflict, ec.value(),
                                  ec == asio::error::broken_pipe ? "the exec no longer reads stdin"
                                                                 : "write stdin: " + ec.message()};
                          if (p.done) p.done(std::unexpected(e));
                          drop_stdin(e);
                          stdin_.reset();
                          return;
                        }
                        if (p.done) p.done({});
                        if (queue_.empty()) {
                          if (closing_) stdin_.reset();
                        } else {
                          write_next();
                        }
                      });
  }

  void read(Stream stream, UniqueFd fd) {
    auto& d = readers_[stream == Stream::stdout_stream ? 0 : 1];
    d = std::make_unique<Descriptor>(reactor_, fd.release());
    d->non_blocking(true);
    arm(stream);
  }

  void arm(Stream stream) {
    auto& d = readers_[stream == Stream::stdout_stream ? 0 : 1];
    if (!d) return;
    d->async_wait(Descriptor::wait_read, [this, stream, alive = alive_](boost::system::error_code ec) {
      if (!*alive) return;
      auto& dd = readers_[stream == Stream::stdout_stream ? 0 : 1];
      if (ec || !dd) return;
      // Bounded work per wake-up keeps one flooding exec from starving the reactor.
      char buf[65536];
      ssize_t n = ::read(dd->native_handle(), buf, sizeof buf);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return arm(stream);
      if (n <= 0) {
        dd.reset();
        listener_.on_output_end(stream);
        return;
      }
      listener_.on_output(stream, std::string_view(buf, static_cast<size_t>(n)));
      if (*alive) arm(stream);
    });
  }

  asio::io_context& reactor_;
  std::unique_ptr<jail::Cgroup> cgroup_;
  ExecListener& listener_;
  bool tty_;
  UniqueFd master_;  // a tty exec's pty master, for resize
  std::unique_ptr<Descriptor> stdin_;
  std::unique_ptr<Descriptor> readers_[2];
  std::deque<Pending> queue_;
  size_t backlog_ = 0;
  bool closing_ = false;
  bool writing_ = false;     // an async_write is in flight
  uint64_t generation_ = 0;  // bumped by drop_stdin
  // Completions posted before destruction check this instead of touching `this`.
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);

 public:
  void kill_alive() { *alive_ = false; }
};

// A sandbox's processes, labelled by the exec (cgroup "e-<n>") that holds each.
class JailProcessTable final : public ProcessTable {
 public:
  JailProcessTable(jail::SandboxProcesses processes, std::map<std::string, std::string> labels)
      : processes_(std::move(processes)), labels_(std::move(labels)) {}
  Result<std::vector<ProcessInfo>> list() const override {
    auto found = processes_.list();
    if (!found) return std::unexpected(found.error());
    std::vector<ProcessInfo> out;
    for (auto& p : *found) {
      ProcessInfo info{p.pid, p.ppid, p.uid, std::move(p.argv), std::move(p.name), {}};
      // A process in a cgroup below an exec's (none are made today) still is that exec's.
      std::string top = p.cgroup.substr(0, p.cgroup.find('/'));
      if (auto it = labels_.find(top); it != labels_.end()) info.exec = it->second;
      out.push_back(std::move(info));
    }
    return out;
  }
  Result<void> signal(pid_t pid, int sig) const override { return processes_.signal(pid, sig); }

 private:
  jail::SandboxProcesses processes_;
  std::map<std::string, std::string> labels_;
};

class JailWriterLauncher final : public WriterLauncher {
 public:
  JailWriterLauncher(jail::CgroupEntry entry, UniqueFd userns) : entry_(std::move(entry)), userns_(std::move(userns)) {}
  Result<FileWriter> start(UniqueFd dest, uint32_t uid, uint32_t gid) override {
    auto w = jail::spawn_file_writer(entry_, std::move(dest), uid, gid);
    if (!w) return std::unexpected(w.error());
    return FileWriter{std::move(w->input), std::move(w->pidfd), std::move(w->status)};
  }
  Result<Helper> start_helper(const std::vector<std::string>& args, UniqueFd fd3) override {
    auto h = jail::spawn_helper(entry_, userns_.get(), args, std::move(fd3));
    if (!h) return std::unexpected(h.error());
    return Helper{std::move(h->input), std::move(h->output), std::move(h->pidfd)};
  }

 private:
  jail::CgroupEntry entry_;
  UniqueFd userns_;
};

class JailInstance final : public Instance {
 public:
  JailInstance(std::unique_ptr<jail::Sandbox> sandbox, jail::UidSlot slot, std::unique_ptr<Disk> disk,
               std::vector<std::shared_ptr<VolumeUse>> volumes, std::shared_ptr<std::atomic<int>> spares)
      : sandbox_(std::move(sandbox)),
        slot_(std::move(slot)),
        disk_(std::move(disk)),
        volumes_(std::move(volumes)),
        spares_(std::move(spares)) {
    if (disk_) {
      meter_ = disk_->meter();
    } else {
      // tmpfs: the upper dir's filesystem, measured from what it holds now (empty).
      UniqueFd fd(::fcntl(sandbox_->upper_fd(), F_DUPFD_CLOEXEC, 3));
      uint64_t base = fd ? jail::fs_used_bytes(fd.get()).value_or(0) : 0;
      meter_ = std::make_shared<DiskMeter>(std::move(fd), -1, base, 0);
    }
  }
  ~JailInstance() override {
    *alive_ = false;
    destroy();
  }

  void attach(asio::io_context& reactor, std::function<void(std::string)> on_died) override {
    reactor_ = &reactor;
    on_died_ = std::move(on_died);
    control_ = Watch(new Descriptor(reactor, sandbox_->control_fd()));
    pidfd_ = Watch(new Descriptor(reactor, sandbox_->pidfd()));
    arm_control();
    if (sandbox_->listener_fd() >= 0) {
      notify_ = Watch(new Descriptor(reactor, sandbox_->listener_fd()));
      arm_notify();
    }
    pidfd_->async_wait(Descriptor::wait_read, [this, alive = alive_](boost::system::error_code ec) {
      if (!*alive || ec) return;
      died("the session's init process died");
    });
  }

  Result<std::unique_ptr<Exec>> exec(const ProcessSpec& spec, ExecListener& listener) override {
    assert(reactor_ && "attach() first");
    if (destroyed_) return fail(ErrorCode::gone, "the sandbox has ended");
    // The exec's own cgroup: the spare made while the previous exec ran, else a new one.
    auto taken = spare_ ? Result<ExecCgroup>(take_spare()) : make_exec_cgroup();
    if (!taken) return std::unexpected(taken.error());
    uint64_t id = taken->id;
    // The exec joins its cgroup itself, before anything else runs in it.
    auto join = taken->cgroup->open_self_attach(true);
    if (!join) {
      retire(std::move(taken->cgroup));
      return std::unexpected(join.error());
    }
    std::vector<int> fds;
    for (auto& fd : *join) fds.push_back(fd.get());
    agent::ExecRequest req = to_exec_request(spec);
    req.id = id;
    auto e = std::make_unique<JailExec>(*reactor_, std::move(taken->cgroup), listener, spec.tty);
    if (auto sent = sandbox_->send_exec(req, fds); !sent) return std::unexpected(sent.error());
    execs_[id] = {e.get(), &listener};
    // A session that runs one exec usually runs another: its cgroup is made once this
    // one has started (on_control), while it runs and the reactor would otherwise
    // wait. Not now: init is starting it, and the reactor may have its execve to
    // answer first.
    want_spare_ = true;
    return std::unique_ptr<Exec>(new ExecHandle(std::move(e), *this, id));
  }

  void on_process(std::function<void(const ProcessEvent&)> fn) override { on_process_ = std::move(fn); }
  void on_violation(std::function<void(const ViolationEvent&)> fn) override { on_violation_ = std::move(fn); }

  Result<jail::CgroupStats> stats() const override { return sandbox_->cgroup().stats(); }
  void freeze(bool frozen, std::function<void(Result<void>)> done) override {
    assert(reactor_ && "attach() first");
    if (destroyed_ || dead_) return post_answer(std::move(done), fail(ErrorCode::gone, "the sandbox has ended"));
    if (freeze_done_)
      return post_answer(std::move(done), fail(ErrorCode::conflict, "a freeze or thaw is already in progress"));
    if (auto r = sandbox_->cgroup().request_freeze(frozen); !r) return post_answer(std::move(done), r);
    frozen_ = frozen;
    freeze_done_ = std::move(done);
    freeze_timer_ = std::make_unique<asio::steady_timer>(*reactor_);
    poll_freeze(frozen, Clock::now(), std::chrono::microseconds(20));
  }
  bool frozen() const override { return frozen_; }
  Result<UniqueFd> open_root() const override {
    std::string root = "/proc/" + std::to_string(sandbox_->init_pid()) + "/root";
    UniqueFd fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return sys_fail("open " + root);
    return fd;
  }
  Result<std::unique_ptr<WriterLauncher>> writer_launcher() const override {
    if (destroyed_) return fail(ErrorCode::gone, "the sandbox has ended");
    auto entry = jail::cgroup_entry(sandbox_->cgroup());
    if (!entry) return std::unexpected(entry.error());
    std::string ns = "/proc/" + std::to_string(sandbox_->init_pid()) + "/ns/user";
    UniqueFd userns(::open(ns.c_str(), O_RDONLY | O_CLOEXEC));
    if (!userns) return sys_fail("open " + ns);
    return std::unique_ptr<WriterLauncher>(new JailWriterLauncher(std::move(*entry), std::move(userns)));
  }
  pid_t host_pid() const override { return sandbox_->init_pid(); }
  Result<std::unique_ptr<ProcessTable>> process_table(
      const std::map<const ExecListener*, std::string>& labels) const override {
    if (destroyed_ || dead_) return fail(ErrorCode::gone, "the sandbox has ended");
    UniqueFd pidfd(::fcntl(sandbox_->pidfd(), F_DUPFD_CLOEXEC, 3));
    if (!pidfd) return sys_fail("dup the init pidfd");
    // Each exec's cgroup is "e-<its id>" below the sandbox's.
    std::map<std::string, std::string> by_cgroup;
    for (const auto& [id, entry] : execs_)
      if (auto it = labels.find(entry.listener); it != labels.end()) by_cgroup["e-" + std::to_string(id)] = it->second;
    return std::unique_ptr<ProcessTable>(new JailProcessTable(
        jail::SandboxProcesses(sandbox_->cgroup().process_dir(), sandbox_->init_pid(), std::move(pidfd),
                               slot_.host_base()),
        std::move(by_cgroup)));
  }
  void open_socket(std::function<void(Result<UniqueFd>)> done) override {
    assert(reactor_ && "attach() first");
    if (destroyed_ || dead_) {
      asio::post(*reactor_, [done = std::move(done)] { done(fail(ErrorCode::gone, "the sandbox has ended")); });
      return;
    }
    uint64_t ref = next_socket_ref_++;
    if (auto sent = sandbox_->request_socket(ref); !sent) {
      asio::post(*reactor_, [done = std::move(done), e = sent.error()] { done(std::unexpected(e)); });
      return;
    }
    sockets_[ref] = std::move(done);
  }
  std::shared_ptr<DiskMeter> disk_meter() const override { return meter_; }
  DiskKind disk_kind() const override { return disk_ ? DiskKind::disk : DiskKind::memory; }
  UniqueFd take_door() override { return sandbox_->take_door(); }
  Result<UniqueFd> open_writable_layer() const override {
    if (sandbox_->upper_fd() < 0) return fail(ErrorCode::gone, "the sandbox's writable layer is gone");
    // A new open file description, not a dup: a dup shares the directory's read
    // position, and a walk that read it to the end would leave the next one empty.
    UniqueFd fd(::openat(sandbox_->upper_fd(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!fd) return sys_fail("open writable layer");
    return fd;
  }
  uint32_t host_id(uint32_t inside) const override { return slot_.host_base() + inside; }
  int64_t slot() const override { return slot_.index(); }

  Teardown destroy() override {
    if (destroyed_) return teardown_;
    destroyed_ = true;
    control_.reset();
    pidfd_.reset();
    notify_.reset();
    fail_sockets();
    finish_freeze(fail(ErrorCode::gone, "the sandbox has ended"));
    if (auto st = sandbox_->cgroup().stats(); st) teardown_.processes_killed = st->pids_current;
    if (frozen_) {
      // Frozen tasks take a SIGKILL only once thawed, and the reap below waits for init:
      // kill first (nothing runs sandbox code in between), then thaw.
      (void)sandbox_->cgroup().kill_all();
      (void)sandbox_->cgroup().request_freeze(false);
      frozen_ = false;
    }
    // Per-exec cgroups are children of the sandbox's: they go first (processes left in
    // one are killed with it).
    for (auto& [id, e] : execs_) e.exec->forget_cgroup();
    drop_spare();
    retired_.clear();
    auto report = sandbox_->destroy();
    if (report) teardown_.cgroup_removed = report->cgroup_removed;
    else teardown_.error = report.error().message();
    // Every process is gone: the writable layer and the volumes have no user left.
    meter_->close();
    teardown_.disk = meter_->usage();
    if (disk_) {
      std::shared_ptr<Disk> disk = std::move(disk_);
      teardown_.disk_freed = true;  // its image was never linked: nothing on the host refers to it
      teardown_.release_disk = [disk] { return disk->release().loop_detached; };
    } else {
      teardown_.disk_freed = sandbox_->upper_fd() < 0;  // the tmpfs went with its last reference
    }
    teardown_.volumes_released = volumes_.size();
    volumes_.clear();
    return teardown_;
  }

 private:
  // What the session holds: the exec, unregistered from the instance when dropped.
  class ExecHandle final : public Exec {
   public:
    ExecHandle(std::unique_ptr<JailExec> e, JailInstance& owner, uint64_t id)
        : e_(std::move(e)), owner_(owner), id_(id), owner_alive_(owner.alive_) {}
    ~ExecHandle() override {
      if (*owner_alive_) owner_.execs_.erase(id_);
      e_->kill_alive();
    }
    void write_stdin(std::string data, std::function<void(Result<void>)> done) override {
      e_->write_stdin(std::move(data), std::move(done));
    }
    void close_stdin() override { e_->close_stdin(); }
    size_t stdin_backlog() const override { return e_->stdin_backlog(); }
    void drop_stdin(const Error& why) override { e_->drop_stdin(why); }
    Result<void> signal_tree(int sig) override { return e_->signal_tree(sig); }
    Result<void> kill_tree() override { return e_->kill_tree(); }
    Result<jail::CgroupStats> stats() const override { return e_->stats(); }
    void stop_output() override { e_->stop_output(); }
    Result<void> resize(uint16_t cols, uint16_t rows) override { return e_->resize(cols, rows); }
    // The empty cgroup is removed after the current reactor turn (the exec's answer
    // goes first); a sandbox already gone removed it with its own.
    bool release_if_empty() override {
      if (!*owner_alive_ || owner_.destroyed_) return e_->release_if_empty();
      auto cg = e_->take_if_empty();
      if (!cg) return e_->release_if_empty();
      owner_.retire(std::move(cg));
      return true;
    }

   private:
    std::unique_ptr<JailExec> e_;
    JailInstance& owner_;
    uint64_t id_;
    std::shared_ptr<bool> owner_alive_;
  };

  struct Entry {
    JailExec* exec;
    ExecListener* listener;
    bool start_failed = false;
  };

  using Clock = std::chrono::steady_clock;

  // ---- per-exec cgroups (cgroup "e-<id>" below the sandbox's) ---------------------
  // Making one costs a mkdir per hierarchy and removing it an rmdir per hierarchy:
  // neither is done between an exec request and its answer when it can be avoided. A
  // spare is made once an exec has started (the reactor waits for it to end then
  // anyway) and taken by the next exec; an ended exec's cgroup is removed after the
  // turn that answered it. At most kMaxSpares sandboxes of a backend hold a spare (each is a
  // memory cgroup in the kernel); the others make their cgroup in the request.
  struct ExecCgroup {
    uint64_t id = 0;
    std::unique_ptr<jail::Cgroup> cgroup;
  };

  Result<ExecCgroup> make_exec_cgroup() {
    uint64_t id = next_id_++;
    auto cg = sandbox_->cgroup().create_child("e-" + std::to_string(id));
    if (!cg) return std::unexpected(cg.error());
    return ExecCgroup{id, std::move(*cg)};
  }
  ExecCgroup take_spare() {
    ExecCgroup taken = std::move(*spare_);
    drop_spare();
    return taken;
  }
  void drop_spare() {
    if (!spare_) return;
    spare_.reset();
    spares_->fetch_sub(1);
  }
  void retire(std::unique_ptr<jail::Cgroup> cgroup) {
    retired_.push_back(std::move(cgroup));
    tidy_later();
  }
  // Once per reactor turn at most: removes retired cgroups, then makes the spare.
  void tidy_later() {
    if (tidy_posted_ || !reactor_) return;
    tidy_posted_ = true;
    asio::post(*reactor_, [this, alive = alive_] {
      if (!*alive) return;
      tidy_posted_ = false;
      if (destroyed_) return;
      // No cgroup made or removed while the session freezes or stays frozen: a
      // freezer settling must see a still tree. The thaw tidies (finish_freeze).
      if (freeze_done_ || frozen_) return;
      for (auto& cg : std::exchange(retired_, {}))
        if (auto r = cg->destroy(); !r)
          std::fprintf(stderr, "cela: remove cgroup %s: %s\n", cg->name().c_str(), r.error().message().c_str());
      if (!want_spare_ || spare_ || dead_) return;
      if (spares_->fetch_add(1) >= kMaxSpares) {
        spares_->fetch_sub(1);
        return;
      }
      auto made = make_exec_cgroup();
      if (!made) {
        spares_->fetch_sub(1);
        return;  // the next exec makes its own (and reports why not)
      }
      spare_ = std::move(*made);
    });
  }

  // Never inside the caller's own call: the answer comes on a later reactor turn, and
  // also once the instance is gone (the completion holds what it needs).
  void post_answer(std::function<void(Result<void>)> done, Result<void> r) {
    asio::post(*reactor_, [done = std::move(done), r = std::move(r)] { done(r); });
  }
  void finish_freeze(Result<void> r) {
    freeze_timer_.reset();
    if (freeze_done_) post_answer(std::exchange(freeze_done_, nullptr), std::move(r));
    if (!frozen_ && !destroyed_ && (want_spare_ || !retired_.empty())) tidy_later();
  }

  // Reads the freezer's state; until it reports `frozen`, again after `wait` (doubled
  // each time, at most 2 ms: a few tasks settle within microseconds, a busy tree
  // within a few ms). A v1 freezer can stay FREEZING for good when a task joined the
  // cgroup while it froze (an exec's process writes itself into its cgroup's `tasks`),
  // so a freeze that has not settled is asked for again on every poll, and every
  // kRefreezeEvery-th poll thaws for kRefreezePause first (runc found the same on v1
  // kernels; on v2 the repeated write is a no-op). A freeze still not settled after
  // jail::kFreezeTimeout is thawed.
  static constexpr unsigned kRefreezeEvery = 50;
  static constexpr std::chrono::milliseconds kRefreezePause{5};
  void poll_freeze(bool frozen, Clock::time_point began, std::chrono::microseconds wait, unsigned polls = 0) {
    auto settled = sandbox_->cgroup().freeze_settled(frozen);
    bool late = Clock::now() - began > jail::kPauseTimeout;
    if (!settled || *settled || late) {
      if (settled && *settled) return finish_freeze({});
      if (settled)  // before the thaw: who did not freeze, and where it sleeps
        std::fprintf(stderr, "cela: %s %s did not settle within %lld ms; its processes:%s\n",
                     frozen ? "freezing" : "thawing", sandbox_->cgroup().name().c_str(),
                     static_cast<long long>(jail::kPauseTimeout.count()), describe_members().c_str());
      if (frozen) {
        (void)sandbox_->cgroup().request_freeze(false);
        frozen_ = false;
      }
      if (!settled) return finish_freeze(std::unexpected(settled.error()));
      // Not a fault of the caller's nor a broken invariant: the host is slow to settle
      // it, and the session runs on as before, so the caller may try again.
      return finish_freeze(fail(ErrorCode::capacity_exceeded,
                                std::string(frozen ? "freezing" : "thawing") + " the session did not settle within " +
                                    std::to_string(jail::kPauseTimeout.count()) +
                                    " ms (the host is busy); it runs on as before: try again"));
    }
    auto next = std::min<std::chrono::microseconds>(wait * 2, std::chrono::milliseconds(2));
    if (frozen) {
      bool rethaw = ++polls % kRefreezeEvery == 0;
      // A failed write shows in the next read (or the timeout): nothing to do here.
      (void)sandbox_->cgroup().request_freeze(!rethaw);
      if (rethaw) wait = kRefreezePause;
    }
    freeze_timer_->expires_after(wait);
    freeze_timer_->async_wait([this, alive = alive_, frozen, began, next, polls](boost::system::error_code ec) {
      if (!*alive || ec || !freeze_done_) return;  // destroy() answered it
      poll_freeze(frozen, began, next, polls);
    });
  }

  // Every process of the sandbox with its scheduler state and where it sleeps (a frozen
  // one in the refrigerator), for the log line of a freeze that did not settle.
  std::string describe_members() const {
    auto members = jail::list_members(sandbox_->cgroup().process_dir());
    if (!members) return " (" + members.error().message() + ")";
    std::string out;
    size_t shown = 0;
    for (const auto& m : *members) {
      if (++shown > 16) return out + " ...";
      std::string proc = "/proc/" + std::to_string(m.pid);
      auto stat = read_file(proc + "/stat");
      auto wchan = read_file(proc + "/wchan");
      std::string state = "?";
      if (stat)
        if (auto close = stat->rfind(") "); close != std::string::npos && close + 2 < stat->size())
          state = stat->substr(close + 2, 1);
      out += " " + std::to_string(m.pid) + (m.child.empty() ? "" : "[" + m.child + "]") + " " + state + " " +
             (wchan ? *wchan : "?");
    }
    return out.empty() ? " none" : out;
  }

  void arm_control() {
    if (!control_) return;
    control_->async_wait(Descriptor::wait_read, [this, alive = alive_](boost::system::error_code ec) {
      if (!*alive || ec || !control_) return;
      on_control();
    });
  }

  void on_control() {
    auto msg = sandbox_->next_event();
    if (!msg) return died("the session's init process closed its control channel");
    agent::MessageType type = msg->type();
    if (type == agent::MessageType::socket) {
      on_socket(*msg);
      if (*alive_ && !destroyed_) arm_control();
      return;
    }
    auto* idv = msg->body.if_contains("id");
    uint64_t id = idv && idv->is_number() ? idv->to_number<uint64_t>() : 0;
    auto it = execs_.find(id);
    if (it != execs_.end() && !it->second.start_failed) {
      Entry entry = it->second;
      if (type == agent::MessageType::started && msg->fds.size() != 3) {
        // The daemon had no descriptor left for the exec's pipes (the kernel dropped
        // them): it cannot be served. It ends here; the session goes on.
        it->second.start_failed = true;  // its `exited` is not reported again
        (void)entry.exec->kill_tree();
        entry.listener->on_start_failed({agent::ExecStep::pipe, msg->fds_truncated ? EMFILE : EPROTO});
      } else if (type == agent::MessageType::started) {
        auto* pid = msg->body.if_contains("pid");
        entry.exec->started(std::move(msg->fds[0]), std::move(msg->fds[1]), std::move(msg->fds[2]));
        entry.listener->on_started(pid && pid->is_number() ? pid->to_number<pid_t>() : 0);
        if (*alive_ && !destroyed_) tidy_later();  // the spare, while this exec runs
      } else if (type == agent::MessageType::exec_error) {
        StartFailure f;
        if (auto* s = msg->body.if_contains("step"); s && s->is_string()) f.step = agent::exec_step(s->as_string());
        if (auto* e = msg->body.if_contains("errno"); e && e->is_number()) f.err = e->to_number<int>();
        entry.listener->on_start_failed(f);
      } else if (type == agent::MessageType::exited) {
        auto* st = msg->body.if_contains("status");
        entry.listener->on_exited(st && st->is_number() ? st->to_number<int>() : 0);
      }
    }
    if (*alive_ && !destroyed_) arm_control();
  }

  void on_socket(agent::Message& msg) {
    auto* refv = msg.body.if_contains("ref");
    auto it = sockets_.find(refv && refv->is_number() ? refv->to_number<uint64_t>() : 0);
    if (it == sockets_.end()) return;
    auto done = std::move(it->second);
    sockets_.erase(it);
    auto* errv = msg.body.if_contains("errno");
    int err = errv && errv->is_number() ? errv->to_number<int>() : EPROTO;
    if (msg.fds.size() == 1 && err == 0) {
      // Only what was asked for: a TCP socket of the sandbox (defence in depth: init is
      // ours, but the descriptor crosses into the daemon).
      int domain = 0, type = 0;
      socklen_t len = sizeof domain;
      bool tcp = ::getsockopt(msg.fds[0].get(), SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_INET &&
                 (len = sizeof type, ::getsockopt(msg.fds[0].get(), SOL_SOCKET, SO_TYPE, &type, &len) == 0) &&
                 type == SOCK_STREAM;
      if (!tcp) return done(fail(ErrorCode::internal, "the sandbox handed back something other than a TCP socket"));
      return done(std::move(msg.fds[0]));
    }
    if (msg.fds_truncated || err == EMFILE || err == ENFILE)
      return done(fail(ErrorCode::system, "no descriptor left for a port connection", err ? err : EMFILE));
    done(fail(ErrorCode::system, "the sandbox could not open a socket", err ? err : EPROTO));
  }

  void fail_sockets() {
    auto pending = std::move(sockets_);
    sockets_.clear();
    for (auto& [ref, done] : pending)
      asio::post(*reactor_, [done = std::move(done)] { done(fail(ErrorCode::gone, "the sandbox has ended")); });
  }

  // One notification per wake-up: a session that execs in a loop shares the reactor
  // fairly (each of its execve calls waits for its turn). And at most
  // kNotificationsPerSecond of them: past that the listener waits on a timer, so a
  // sandbox that calls denied syscalls in a tight loop (each costs the reactor a receive,
  // two /proc reads and an answer, and the sandbox almost nothing) slows only itself,
  // its callers blocked in their syscalls meanwhile.
  void arm_notify() {
    if (!notify_) return;
    if (auto wait = notify_budget_.until_next(); wait > TokenBucket::Clock::duration::zero()) {
      if (!notify_timer_) notify_timer_ = std::make_unique<asio::steady_timer>(*reactor_);
      notify_timer_->expires_after(wait);
      notify_timer_->async_wait([this, alive = alive_](boost::system::error_code ec) {
        if (*alive && !ec) arm_notify();
      });
      return;
    }
    notify_->async_wait(Descriptor::wait_read, [this, alive = alive_](boost::system::error_code ec) {
      if (!*alive || ec || !notify_) return;
      (void)notify_budget_.take();
      auto n = jail::take_notification(notify_->native_handle());
      if (!n) {
        std::fprintf(stderr, "cela: seccomp watch of %s stopped: %s\n", sandbox_->cgroup().name().c_str(),
                     n.error().message().c_str());
        notify_.reset();
        return;
      }
      if (*n) {
        if (auto* exec = std::get_if<jail::ExecNotification>(&**n)) {
          if (on_process_) on_process_(to_event(*exec));
        } else if (on_violation_) {
          on_violation_(to_event(std::get<jail::ViolationNotification>(**n)));
        }
      }
      if (*alive_) arm_notify();
    });
  }

  // The exec whose cgroup ".../<sandbox>/e-<n>" is, while it runs.
  ExecListener* exec_of(const std::string& cgroup) {
    auto slash = cgroup.rfind("/e-");
    if (slash == std::string::npos) return nullptr;
    uint64_t id = std::strtoull(cgroup.c_str() + slash + 3, nullptr, 10);
    auto it = execs_.find(id);
    return it == execs_.end() ? nullptr : it->second.listener;
  }

  uint32_t inside_id(uint32_t host) const {
    uint32_t base = slot_.host_base();
    return host >= base && host - base < 65536 ? host - base : host;
  }

  ViolationEvent to_event(const jail::ViolationNotification& n) {
    ViolationEvent e;
    e.pid = n.pid;
    e.uid = inside_id(n.uid);
    e.gid = inside_id(n.gid);
    e.syscall = n.syscall;
    e.args = n.args;
    e.err = jail::kViolationErrno;
    e.exec = exec_of(n.cgroup);
    return e;
  }

  ProcessEvent to_event(const jail::ExecNotification& n) {
    ProcessEvent e;
    e.pid = n.pid;
    e.ppid = n.ppid;
    e.uid = inside_id(n.uid);
    e.gid = inside_id(n.gid);
    e.syscall = n.syscall;
    e.path = n.path;
    e.argv = n.argv;
    e.truncated = n.truncated;
    e.exec = exec_of(n.cgroup);
    return e;
  }

  void died(std::string why) {
    if (destroyed_ || dead_) return;
    dead_ = true;
    control_.reset();
    pidfd_.reset();
    fail_sockets();
    if (on_died_) on_died_(std::move(why));
  }

  std::unique_ptr<jail::Sandbox> sandbox_;
  jail::UidSlot slot_;  // released after the sandbox is gone (member order)
  std::unique_ptr<Disk> disk_;  // null: a tmpfs layer (or handed to teardown_.release_disk)
  std::vector<std::shared_ptr<VolumeUse>> volumes_;
  std::shared_ptr<DiskMeter> meter_;
  asio::io_context* reactor_ = nullptr;
  std::function<void(std::string)> on_died_;
  Watch control_, pidfd_, notify_;  // released before sandbox_ closes them (destroy, died)
  std::function<void(const ProcessEvent&)> on_process_;
  std::function<void(const ViolationEvent&)> on_violation_;
  TokenBucket notify_budget_{kNotificationsPerSecond, kNotificationBurst};
  std::unique_ptr<asio::steady_timer> notify_timer_;  // while the budget refills
  std::map<uint64_t, Entry> execs_;
  uint64_t next_id_ = 1;
  std::optional<ExecCgroup> spare_;
  std::vector<std::unique_ptr<jail::Cgroup>> retired_;  // empty exec cgroups to remove
  bool want_spare_ = false, tidy_posted_ = false;
  std::shared_ptr<std::atomic<int>> spares_;  // the backend's count of sandboxes holding a spare
  std::map<uint64_t, std::function<void(Result<UniqueFd>)>> sockets_;  // open_socket requests in flight
  uint64_t next_socket_ref_ = 1;
  bool destroyed_ = false, dead_ = false;
  bool frozen_ = false;                                // as last requested
  std::unique_ptr<asio::steady_timer> freeze_timer_;  // while a freeze or thaw settles
  std::function<void(Result<void>)> freeze_done_;     // its completion
  Teardown teardown_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class JailBackend final : public Backend {
 public:
  JailBackend(std::unique_ptr<jail::CgroupHost> cgroups, UniqueFd seccomp, JailOptions options,
              std::unique_ptr<DiskPool> disks)
      : cgroups_(std::move(cgroups)),
        seccomp_(std::move(seccomp)),
        options_(std::move(options)),
        disks_(std::move(disks)),
        volumes_(disks_->ledger()) {}
  std::string_view name() const override { return "jail"; }

  Result<std::unique_ptr<Instance>> start(const InstanceSpec& spec) override {
    jail::SandboxSpec sb;
    sb.name = spec.name;
    sb.hostname = spec.hostname;
    sb.rootfs.layers = spec.rootfs.layers;
    for (const auto& [source, target] : spec.rootfs.binds) sb.rootfs.binds.emplace_back(source, target);
    sb.rootfs.disk_bytes = spec.disk_bytes;
    sb.rootfs.pty_max = options_.pty_max;
    sb.limits = spec.limits;
    sb.budgets = options_.budgets;
    sb.listener = options_.watch.any();
    sb.door_port = spec.door_port;
    auto slot = jail::UidSlot::acquire(jail::kSlotLockDir, options_.uid_slots);
    if (!slot) {
      Error e = slot.error();
      if (e.code == ErrorCode::limit) e.code = ErrorCode::capacity_exceeded;  // 503: retry later
      return std::unexpected(e);
    }
    sb.host_uid_base = slot->host_base();
    std::unique_ptr<Disk> disk;
    if (spec.disk_kind == DiskKind::disk) {
      auto taken = disks_->take(spec.disk_bytes);
      if (!taken) return std::unexpected(taken.error());
      disk = std::move(*taken);
      sb.disk_root = disk->root();
    }
    std::vector<std::shared_ptr<VolumeUse>> uses;
    for (const VolumeSpec& v : spec.volumes) {
      auto use = volumes_.acquire(v.image, !v.read_only);
      if (!use) return std::unexpected(use.error());
      sb.volumes.push_back({(*use)->root(), v.target, v.read_only});
      uses.push_back(std::move(*use));
    }
    auto sandbox = jail::Sandbox::start(sb, *cgroups_, seccomp_.get());
    if (!sandbox) return std::unexpected(sandbox.error());  // disk and volumes let go here
    return std::unique_ptr<Instance>(
        new JailInstance(std::move(*sandbox), std::move(*slot), std::move(disk), std::move(uses), spares_));
  }

  Result<void> remove_stale(const std::string& name) override { return cgroups_->remove_stale(name); }
  DiskPoolStats disk_pool_stats() const override { return disks_->stats(); }
  bool volume_in_use(const std::string& image) const override { return volumes_.in_use(image); }
  Result<std::vector<std::string>> names() const override { return cgroups_->list(); }
  std::vector<std::string> notes() const override {
    std::vector<std::string> notes;
    if (!jail::can_protect_init_from_oom())
      notes.push_back("no CAP_SYS_RESOURCE: session inits keep cela's OOM score (only execs go first)");
    return notes;
  }

 private:
  std::unique_ptr<jail::CgroupHost> cgroups_;
  UniqueFd seccomp_;  // the policy, sealed once for every init
  JailOptions options_;
  std::unique_ptr<DiskPool> disks_;
  VolumeMounts volumes_;
  std::shared_ptr<std::atomic<int>> spares_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace

Result<void> file_writer_result(const FileWriter& writer, bool& reaped) {
  return jail::file_writer_result(writer.status.get(), writer.pidfd.get(), reaped);
}
Result<int> reap_helper(int pidfd) { return jail::reap_pidfd(pidfd); }

agent::ExecRequest to_exec_request(const ProcessSpec& spec) {
  agent::ExecRequest req;
  req.argv = spec.argv;
  req.env = spec.env;
  req.cwd = spec.cwd;
  req.uid = spec.uid;
  req.gid = spec.gid;
  req.nofile = spec.nofile;
  req.fsize_bytes = spec.fsize_bytes;
  req.no_new_privs = spec.no_new_privs;
  req.tty = spec.tty;
  req.cols = spec.cols;
  req.rows = spec.rows;
  return req;
}

Result<std::unique_ptr<Backend>> open_jail_backend(const JailOptions& options) {
  if (auto r = jail::check_user_ns_limits(options.budgets.user_ns); !r) return std::unexpected(r.error());
  auto mode = jail::detect_cgroup_mode();
  if (!mode) return std::unexpected(mode.error());
  auto host = jail::open_cgroup_host(*mode, "/sys/fs/cgroup", {.io = options.io});
  if (!host) return std::unexpected(host.error());
  // Compiled once per daemon (from the cache when this binary compiled it before) and
  // sealed once: every init gets the same read-only memfd (agent/seccomp_program.h).
  auto program = jail::cached_seccomp_program(options.watch);
  if (!program) return std::unexpected(program.error());
  auto seccomp = agent::seal_seccomp_program(*program);
  if (!seccomp) return std::unexpected(seccomp.error());
  // The sealed images every session's init (and helper) runs from, made before the
  // first session needs them (and a failure to make one is a failure to start).
  if (auto image = jail::sealed_init_image(); !image) return std::unexpected(image.error());
  if (options.helpers)
    if (auto image = jail::sealed_helper_image(); !image) return std::unexpected(image.error());
  auto disks = DiskPool::open(options.disks);
  if (!disks) return std::unexpected(disks.error());
  if ((*disks)->recovered_loops() || (*disks)->recovered_files())
    std::fprintf(stderr, "cela: disks: recovered %d loop device(s) and %d image file(s) a previous daemon left\n",
                 (*disks)->recovered_loops(), (*disks)->recovered_files());
  return std::unique_ptr<Backend>(new JailBackend(std::move(*host), std::move(*seccomp), options, std::move(*disks)));
}

Result<jail::IoLimits> resolve_block_io(const BlockIoRequest& request, std::vector<std::string>& notes) {
  jail::IoLimits io;
  bool throttles = request.read_bps || request.write_bps || request.read_iops || request.write_iops;
  if (!request.weight && !throttles) return io;
  auto mode = jail::detect_cgroup_mode();
  if (!mode) return std::unexpected(mode.error());
  // A host opened with a placeholder weight only to ask what it supports.
  auto host = jail::open_cgroup_host(*mode, "/sys/fs/cgroup", {.io = {.weight = 1, .devices = {}}});
  if (!host) return std::unexpected(host.error());
  jail::IoSupport support = (*host)->io_support();
  if (request.weight && !support.weight)
    notes.push_back("block_io.weight: no weight file in this host's cgroups (no io/blkio controller or no "
                    "proportional scheduler); not applied");
  else
    io.weight = request.weight;
  if (throttles && !support.throttle) {
    notes.push_back("block_io throttles: this host's cgroups cannot throttle (no io/blkio controller); not applied");
    throttles = false;
  }
  for (const std::string& path : throttles ? request.paths : std::vector<std::string>{}) {
    auto disk = jail::whole_disk_of(path);
    if (!disk) return std::unexpected(disk.error());
    if (!*disk) {
      notes.push_back("block_io: " + path + " is on no block device; not throttled");
      continue;
    }
    jail::BlockDeviceLimit limit{(*disk)->first, (*disk)->second, request.read_bps, request.write_bps,
                                 request.read_iops, request.write_iops};
    if (std::ranges::find(io.devices, limit) == io.devices.end()) io.devices.push_back(limit);
  }
  return io;
}

}  // namespace cela::runtime
