// The backend interface a session runs on. The session layer drives sandboxes only
// through it, so a second backend (a microVM) can come without touching sessions.
//
// Lifecycle: Backend::start() builds and boots one sandbox and blocks until it can
// run code (call it on the launcher thread, never on the reactor). The Instance it
// returns is then attached to the session reactor (Instance::attach) and from there
// on is reactor-only: every method, and every listener callback, runs on the
// reactor thread. Output is pushed to the ExecListener as chunks as it arrives.
#pragma once

#include <sys/types.h>

#include <boost/asio/io_context.hpp>
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "agent/protocol.h"
#include "common/fd.h"
#include "jail/cgroup.h"
#include "runtime/storage.h"

namespace cela::runtime {

struct LayerStack {
  std::vector<std::string> layers;                          // read-only dirs, bottom first
  std::vector<std::pair<std::string, std::string>> binds;  // host source -> target (dev-only)
};

// A volume to show inside: its image (runtime/storage.h VolumeMounts mounts it once
// for every sandbox using it) at `target`.
struct VolumeSpec {
  std::string image;
  std::string target;
  bool read_only = false;
};

struct InstanceSpec {
  std::string name;      // unique among live instances (cgroup name)
  std::string hostname;  // inside
  LayerStack rootfs;
  uint64_t disk_bytes = 0;  // writable layer size
  DiskKind disk_kind = DiskKind::disk;
  std::vector<VolumeSpec> volumes;
  jail::CgroupLimits limits;
  // Non-zero: the sandbox gets an egress door, a listener on 127.0.0.1:door_port
  // inside that the host accepts on (Instance::take_door).
  uint16_t door_port = 0;
};

// Accounting of a sandbox or an exec, and its limits (the jail's types serve every
// backend).
using Stats = jail::CgroupStats;
using Limits = jail::CgroupLimits;

// One process to start inside: the complete environment, identity and limits.
struct ProcessSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V", complete
  std::string cwd = "/";
  uint32_t uid = 0, gid = 0;
  uint64_t nofile = 4096;
  uint64_t fsize_bytes = 0;  // RLIMIT_FSIZE; 0 = unlimited
  bool no_new_privs = true;
  // On a pty of the sandbox's own devpts: the process leads a new session with the pty
  // as its controlling terminal; its output is one stream (stdout), stdin goes to the
  // terminal (so ^C reaches the foreground process group), stderr stays empty.
  bool tty = false;
  uint16_t cols = 80, rows = 24;
};

enum class Stream { stdout_stream, stderr_stream };
std::string_view to_string(Stream stream);

// Why a process did not start: the step inside the sandbox (shared with the agent)
// and its errno.
using ExecStep = agent::ExecStep;
using agent::to_string;
struct StartFailure {
  ExecStep step = ExecStep::unknown;
  int err = 0;
};

class ExecListener;

// A program executed inside the sandbox, seen by the host while its execve waited
// (backends that can: the jail with JailOptions::watch.execs).
struct ProcessEvent {
  pid_t pid = 0, ppid = 0;    // inside the sandbox (0: unknown)
  uint32_t uid = 0, gid = 0;  // inside
  std::string syscall;        // execve | execveat
  std::string path;
  std::vector<std::string> argv;
  bool truncated = false;
  ExecListener* exec = nullptr;  // the exec whose tree it belongs to, while it is known
};

// An attempt at a syscall the policy denies, seen by the host while the caller waited
// for its EPERM (the jail with JailOptions::watch.violations).
struct ViolationEvent {
  pid_t pid = 0;              // inside the sandbox (0: unknown)
  uint32_t uid = 0, gid = 0;  // inside
  std::string syscall;        // e.g. mount, ptrace, clone (with namespace flags)
  std::array<uint64_t, 6> args{};
  int err = 0;                   // what the caller got
  ExecListener* exec = nullptr;  // the exec whose tree it belongs to, while it is known
};

// Receives one exec's life, on the reactor thread. Every exec ends with exactly one of
// on_start_failed or on_exited; output may still arrive after on_exited (background
// processes holding the pipes) until both streams have ended.
class ExecListener {
 public:
  virtual ~ExecListener() = default;
  virtual void on_started(pid_t pid_inside) = 0;
  virtual void on_start_failed(const StartFailure& failure) = 0;
  virtual void on_output(Stream stream, std::string_view data) = 0;
  virtual void on_output_end(Stream stream) = 0;
  virtual void on_exited(int wait_status) = 0;
};

// A started exec, reactor-only. Dropping it stops reading its output and closes stdin.
class Exec {
 public:
  virtual ~Exec() = default;
  // Queues `data` for the process's stdin, written without blocking as the pipe takes
  // it; `done` runs once all of it has been written (or the pipe broke).
  virtual void write_stdin(std::string data, std::function<void(Result<void>)> done) = 0;
  // Closes stdin once what is queued has been written.
  virtual void close_stdin() = 0;
  // Bytes queued for stdin and not yet taken by the process.
  virtual size_t stdin_backlog() const = 0;
  // Drops what is queued for stdin (its completions see an error).
  virtual void drop_stdin(const Error& why) = 0;
  // The exec's whole process tree (its own cgroup), setsid'd grandchildren included.
  virtual Result<void> signal_tree(int sig) = 0;
  virtual Result<void> kill_tree() = 0;
  virtual Result<jail::CgroupStats> stats() const = 0;
  // Stops reading output (both streams end now).
  virtual void stop_output() = 0;
  // A tty exec's terminal size (the kernel sends the foreground process group
  // SIGWINCH); conflict for an exec without a tty.
  virtual Result<void> resize(uint16_t cols, uint16_t rows) = 0;
  // Removes the exec's accounting once none of its processes is left; true if removed.
  virtual bool release_if_empty() = 0;
};

// One process of a sandbox as the sandbox sees it (Instance::process_table).
struct ProcessInfo {
  pid_t pid = 0, ppid = 0;  // inside (init is 1; its ppid 0: its parent is outside)
  uint32_t uid = 0;         // effective, inside
  std::vector<std::string> argv;  // empty for a zombie
  std::string name;               // comm
  std::string exec;               // the label of the exec whose cgroup holds it; "" = none (init, strays)
};

// The processes of one sandbox, listed and signalled from any thread. Blocking (it
// reads /proc): never on the reactor. A sandbox that ended meanwhile answers gone.
class ProcessTable {
 public:
  virtual ~ProcessTable() = default;
  virtual Result<std::vector<ProcessInfo>> list() const = 0;
  // permission_denied for init (pid 1); not_found for a pid that is no process of
  // this sandbox. The process is pinned (a pidfd) before it is signalled.
  virtual Result<void> signal(pid_t pid, int sig) const = 0;
};

// A process charged to the sandbox (its memory cgroup) that copies what is written to
// `input` into one file the caller opened (jail/file_writer.h says how it is confined).
// Close `input` to end it; `pidfd` is readable once it has exited, then
// reap_file_writer() says whether every byte landed.
struct FileWriter {
  UniqueFd input;   // the write end of its stdin pipe
  UniqueFd pidfd;
  UniqueFd status;  // readable once it is done (file_writer_result)
};

// A program started on the sandbox's behalf: input is its stdin, output its stdout.
struct Helper {
  UniqueFd input, output, pidfd;
};

// Starts FileWriters and Helpers for one sandbox. Made on the reactor (Instance::writer_launcher),
// used from any thread: it holds its own descriptors of the sandbox's cgroups, and a
// sandbox that ended meanwhile makes start() or the writer fail, nothing worse.
class WriterLauncher {
 public:
  virtual ~WriterLauncher() = default;
  // `dest` is open for writing; the writer runs as the host ids uid/gid (never 0).
  virtual Result<FileWriter> start(UniqueFd dest, uint32_t uid, uint32_t gid) = 0;
  // `cela <args...>` as the sandbox's root in its user namespace and cgroups, `fd3` as
  // its descriptor 3 (jail/file_writer.h spawn_helper): the archive import.
  virtual Result<Helper> start_helper(const std::vector<std::string>& args, UniqueFd fd3) = 0;
};

// The wait status of an exited helper (once its pidfd is readable).
Result<int> reap_helper(int pidfd);

// Once its status is readable: ok, or why its bytes did not all land (limit for a full
// disk or memory, gone when the sandbox ended first). `reaped` tells whether the
// writer was reaped on the way (else reap it with reap_helper).
Result<void> file_writer_result(const FileWriter& writer, bool& reaped);

struct Teardown {
  uint64_t processes_killed = 0;
  bool cgroup_removed = false;
  // The writable layer: a tmpfs is freed with its last reference; a disk-backed
  // one's image (never linked) is gone and its loop device unbound.
  bool disk_freed = false;
  uint64_t volumes_released = 0;
  DiskUsage disk;  // the writable layer's last reading
  std::string error;  // "" when clean
  // Disk kind: the release of the layer (unmount, loop device, image: tens of ms), left
  // to the caller to run off the reactor; says whether the loop device let go. Empty
  // for a tmpfs layer. Run it at most once, on any thread.
  std::function<bool()> release_disk;
};

class Instance {
 public:
  virtual ~Instance() = default;
  // Begins watching on `reactor`; `on_died` runs (once) when the sandbox's init is
  // gone for any reason other than destroy().
  virtual void attach(boost::asio::io_context& reactor, std::function<void(std::string why)> on_died) = 0;
  // Starts a process; the listener must outlive the Exec.
  virtual Result<std::unique_ptr<Exec>> exec(const ProcessSpec& spec, ExecListener& listener) = 0;
  // Every program executed inside, on the reactor (set after attach; backends that
  // cannot watch never call it).
  virtual void on_process(std::function<void(const ProcessEvent&)> fn) { (void)fn; }
  // Every denied syscall the sandbox attempted, on the reactor (likewise).
  virtual void on_violation(std::function<void(const ViolationEvent&)> fn) { (void)fn; }
  virtual Result<jail::CgroupStats> stats() const = 0;
  // Freezes (true) or thaws (false) every process of the sandbox without blocking the
  // reactor: the new state is requested now and `done` runs later on the reactor, once
  // the kernel reports it (the freezer acts asynchronously; this polls on a timer), or
  // with capacity_exceeded after jail::kPauseTimeout (a freeze that does not settle is
  // thawed again, and its processes' states logged). One change at a time: a call while
  // one is in flight gets conflict. A frozen sandbox keeps its memory and files and uses
  // no CPU; destroy() ends it as usual.
  virtual void freeze(bool frozen, std::function<void(Result<void>)> done) = 0;
  // The state last requested (true from the freeze request until a thaw is requested).
  virtual bool frozen() const = 0;
  // The sandbox's root directory, opened O_PATH from the host (files API, snapshots).
  virtual Result<UniqueFd> open_root() const = 0;
  // The writable layer (the overlay's upper dir) as a directory fd, for snapshots.
  virtual Result<UniqueFd> open_writable_layer() const = 0;
  // The writable layer's use and writes, readable from any thread for as long as the
  // caller holds it (it keeps the last reading after destroy()).
  virtual std::shared_ptr<DiskMeter> disk_meter() const = 0;
  DiskUsage disk_usage() const { return disk_meter()->usage(); }
  virtual DiskKind disk_kind() const = 0;
  // Writers of files on the sandbox's behalf (files API uploads).
  virtual Result<std::unique_ptr<WriterLauncher>> writer_launcher() const = 0;
  // The egress door's listening socket (in the sandbox's network namespace), once;
  // empty when the spec had no door_port.
  virtual UniqueFd take_door() = 0;
  // Host pid of the sandbox's init.
  virtual pid_t host_pid() const = 0;
  // The sandbox's processes, each labelled with the label its exec's listener has in
  // `labels` (listeners of execs still running or holding processes). Made on the
  // reactor (cheap: no /proc read), used anywhere.
  virtual Result<std::unique_ptr<ProcessTable>> process_table(
      const std::map<const ExecListener*, std::string>& labels) const = 0;
  // An unconnected TCP socket created in the sandbox's network namespace (by its init),
  // for the host to connect to a port on the sandbox's loopback: nothing is added to
  // the sandbox's network. `done` runs on the reactor (gone once the sandbox ended).
  virtual void open_socket(std::function<void(Result<UniqueFd>)> done) = 0;
  // The host id that id `inside` maps to (files written on the sandbox's behalf), and
  // the host id range (slot) the sandbox holds.
  virtual uint32_t host_id(uint32_t inside) const = 0;
  virtual int64_t slot() const = 0;
  // Kills everything, waits until it is gone, removes the sandbox's resources.
  // Idempotent; the first call's report is returned again.
  virtual Teardown destroy() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Blocking: claims a host id range, boots the sandbox and returns once it can run
  // code. Call from the launcher thread (PR_SET_PDEATHSIG of the sandbox follows the
  // calling thread). capacity_exceeded when no id range is free.
  virtual Result<std::unique_ptr<Instance>> start(const InstanceSpec& spec) = 0;
  // Removes what an instance named `name` left behind when its daemon died.
  virtual Result<void> remove_stale(const std::string& name) = 0;
  // Ready disk-backed layers (hits, misses, ready).
  virtual DiskPoolStats disk_pool_stats() const = 0;
  // Whether a volume image is mounted for some instance now.
  virtual bool volume_in_use(const std::string& image) const = 0;
  // Names of the instances whose resources exist on this host: live ones (of any
  // daemon or runner) and leftovers. Whoever named them decides which are stale.
  virtual Result<std::vector<std::string>> names() const = 0;
  // What this host cannot give sandboxes, one line each, for the operator's log.
  virtual std::vector<std::string> notes() const = 0;
};

}  // namespace cela::runtime
