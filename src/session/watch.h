// DirWatch: a directory of a live session watched for changes (inotify), the E2B
// facade's WatchDir. The watch lives INSIDE the session: a helper process
// (runtime::Helper, `cela __watch-dir`) born in the session's cgroups and user
// namespace, running as the sandbox user the caller chose (root's capabilities are
// dropped with the uid change), creates the inotify instance and its watches. So
// every instance and watch is charged to that uid of the session's user namespace
// (its /proc/sys/user limits: jail/userns.h KernelBudgets) and, up the chain, to the
// slot's host uid: never to host root, whose inotify limit a sandbox cannot exhaust.
// The helper's memory and pid count are the session's too; a session that ends kills
// it with everything else in its cgroup.
//
// The helper resolves the directory under the session root it is given (fd 3) with the
// rules of SessionFs (openat2 RESOLVE_IN_ROOT, no mount crossing), after dropping to
// the user, so the kernel checks the user's permissions; recursive watches add every
// subdirectory (and each one created later), at most `max_dirs`. It reports on stdout,
// one line each (names hex-encoded, so any byte may appear in a name):
//   R                         the watches are in place
//   E <ops> <hex name>        an event; ops: WatchOp bits; name relative to the dir
//   O                         the kernel's event queue overflowed: events were lost
//   X <code> <errno> <hex>    failure (ErrorCode number, errno, context); it exits
// It exits when its stdin reaches EOF (the daemon closed it) or its stdout is gone.
//
// Bounded: the pipe to the daemon holds at most a pipe buffer; while the reader does not
// read, the helper blocks and the kernel queues (max_queued_events) and then drops
// events (an `O` line). The daemon reads only as fast as its client takes events.
//
// Threads: the helper's output is read on the session reactor (never a shared thread
// waiting on the sandbox); start() and stop() may be called from any thread.
#pragma once

#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "runtime/runtime.h"

namespace cela::session {

enum WatchOp : uint32_t {
  kWatchCreate = 1,  // created, or moved in
  kWatchWrite = 2,   // content modified
  kWatchRemove = 4,  // deleted
  kWatchRename = 8,  // moved away
  kWatchChmod = 16,  // attributes (mode, owner, times) changed
};

struct WatchLine {
  enum class Kind { ready, event, overflow, failed };
  Kind kind = Kind::event;
  std::string name;  // event: relative to the watched directory ("a/b" when recursive)
  uint32_t ops = 0;  // event: WatchOp bits
  Error error;       // failed
};

// Splits the helper's output into lines. A line longer than 16 KiB or malformed is an
// internal error (the helper is the daemon's own binary).
class WatchParser {
 public:
  Result<void> feed(std::string_view bytes, std::vector<WatchLine>& out);

 private:
  std::string partial_;
};

// Where a watch's lines go. Every call runs on the session reactor and must not block.
class WatchSink {
 public:
  virtual ~WatchSink() = default;
  // The next lines, in order (the first is `ready` or `failed`). The watch reads no
  // more of the helper until `more` is called (from any thread, at most once per batch):
  // that is the queue's bound, the sink paces the helper.
  virtual void on_lines(std::vector<WatchLine> lines, std::function<void()> more) = 0;
  // The helper has gone (stop(), the session ended, a failure; after a `failed` line
  // too). Once, last.
  virtual void on_end() = 0;
};

class DirWatch : public std::enable_shared_from_this<DirWatch> {
 public:
  DirWatch(boost::asio::any_io_executor reactor, runtime::Helper helper, std::string path);
  DirWatch(DirWatch&&) = delete;
  // Kills and reaps a helper still running (stop() first avoids the wait).
  ~DirWatch();

  // Begins reading the helper's output into `sink` (call once, any thread).
  void start(std::shared_ptr<WatchSink> sink);
  // Ends the watch (any thread, idempotent): the helper's stdin is closed and it is
  // killed; the sink's on_end follows on the reactor once it has gone.
  void stop();
  // The watched directory as requested.
  const std::string& path() const { return path_; }

 private:
  void read_more();
  void ended();

  boost::asio::any_io_executor reactor_;
  runtime::Helper helper_;
  std::string path_;
  WatchParser parser_;
  std::optional<boost::asio::posix::stream_descriptor> output_, exited_;
  std::shared_ptr<WatchSink> sink_;
  std::array<char, 65536> buf_{};
  bool stopped_ = false, ended_ = false, reaped_ = false;
};

// The helper's side: `cela __watch-dir DIR RECURSIVE UID GID MAX_DIRS` (ids as the sandbox
// sees them, the session root on fd 3).
[[noreturn]] void watch_main(int argc, char** argv);
inline constexpr const char* kWatchCommand = "__watch-dir";

}  // namespace cela::session
