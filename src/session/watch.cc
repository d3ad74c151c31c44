// DirWatch: the daemon's side (the parser, the helper's end) and the helper itself
// (`cela __watch-dir`), see watch.h.
#include "session/watch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <charconv>
#include <map>

#include "common/encoding.h"
#include "session/fs_internal.h"

namespace cela::session {

using namespace fs_detail;

namespace {

constexpr size_t kMaxLine = 16384;

template <class T>
bool parse_number(std::string_view text, T& out) {
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size();
}

// The next space-separated field of `line` from `pos`.
std::string_view field(std::string_view line, size_t& pos) {
  size_t end = line.find(' ', pos);
  if (end == std::string_view::npos) end = line.size();
  std::string_view f = line.substr(pos, end - pos);
  pos = end + 1;
  return f;
}

Result<WatchLine> parse_line(std::string_view line) {
  auto malformed = [&] { return fail(ErrorCode::internal, "malformed line from the watch helper"); };
  WatchLine out;
  if (line == "R") {
    out.kind = WatchLine::Kind::ready;
    return out;
  }
  if (line == "O") {
    out.kind = WatchLine::Kind::overflow;
    return out;
  }
  size_t pos = 2;
  if (line.starts_with("E ")) {
    auto ops = field(line, pos);
    auto name = hex_decode(field(line, pos));
    if (!parse_number(ops, out.ops) || !name) return malformed();
    out.name = std::move(*name);
    return out;
  }
  if (line.starts_with("X ")) {
    int code = 0;
    auto code_text = field(line, pos);
    auto err_text = field(line, pos);
    auto context = hex_decode(field(line, pos));
    if (!parse_number(code_text, code) || !parse_number(err_text, out.error.err) || !context || code < 0 ||
        code > static_cast<int>(ErrorCode::internal))
      return malformed();
    out.kind = WatchLine::Kind::failed;
    out.error.code = static_cast<ErrorCode>(code);
    out.error.context = std::move(*context);
    return out;
  }
  return malformed();
}

}  // namespace

Result<void> WatchParser::feed(std::string_view bytes, std::vector<WatchLine>& out) {
  partial_.append(bytes);
  size_t start = 0;
  for (;;) {
    size_t nl = partial_.find('\n', start);
    if (nl == std::string::npos) break;
    auto line = parse_line(std::string_view(partial_).substr(start, nl - start));
    if (!line) return std::unexpected(line.error());
    out.push_back(std::move(*line));
    start = nl + 1;
  }
  partial_.erase(0, start);
  if (partial_.size() > kMaxLine) return fail(ErrorCode::internal, "overlong line from the watch helper");
  return {};
}

DirWatch::DirWatch(boost::asio::any_io_executor reactor, runtime::Helper helper, std::string path)
    : reactor_(std::move(reactor)), helper_(std::move(helper)), path_(std::move(path)) {}

DirWatch::~DirWatch() {
  if (!helper_.pidfd || reaped_) return;
  helper_.input.reset();
  ::syscall(SYS_pidfd_send_signal, helper_.pidfd.get(), SIGKILL, nullptr, 0);
  (void)runtime::reap_helper(helper_.pidfd.get());
}

void DirWatch::start(std::shared_ptr<WatchSink> sink) {
  boost::asio::post(reactor_, [self = shared_from_this(), sink = std::move(sink)]() mutable {
    self->sink_ = std::move(sink);
    self->output_.emplace(self->reactor_, self->helper_.output.release());
    self->exited_.emplace(self->reactor_, ::fcntl(self->helper_.pidfd.get(), F_DUPFD_CLOEXEC, 3));
    if (self->stopped_) return self->ended();
    self->read_more();
  });
}

void DirWatch::read_more() {
  if (stopped_ || !output_) return ended();
  output_->async_read_some(boost::asio::buffer(buf_), [self = shared_from_this()](boost::system::error_code ec, size_t n) {
    if (ec || n == 0 || self->stopped_) return self->ended();
    std::vector<WatchLine> lines;
    if (auto r = self->parser_.feed(std::string_view(self->buf_.data(), n), lines); !r) {
      WatchLine bad;
      bad.kind = WatchLine::Kind::failed;
      bad.error = r.error();
      lines.push_back(std::move(bad));
      self->sink_->on_lines(std::move(lines), [] {});
      return self->ended();
    }
    if (lines.empty()) return self->read_more();
    self->sink_->on_lines(std::move(lines), [weak = std::weak_ptr<DirWatch>(self)] {
      if (auto w = weak.lock()) boost::asio::post(w->reactor_, [w] { w->read_more(); });
    });
  });
}

void DirWatch::stop() {
  boost::asio::post(reactor_, [self = shared_from_this()] {
    if (self->stopped_) return;
    self->stopped_ = true;
    if (self->output_) self->output_->cancel();
    self->ended();
  });
}

// On the reactor: the helper is told to go, and once it has, the sink hears of it.
void DirWatch::ended() {
  if (ended_) return;
  ended_ = true;
  stopped_ = true;
  helper_.input.reset();
  ::syscall(SYS_pidfd_send_signal, helper_.pidfd.get(), SIGKILL, nullptr, 0);
  auto finish = [self = shared_from_this()](boost::system::error_code) {
    (void)runtime::reap_helper(self->helper_.pidfd.get());  // it has exited: no wait
    self->reaped_ = true;
    self->output_.reset();
    self->exited_.reset();
    if (auto sink = std::move(self->sink_)) sink->on_end();
  };
  if (exited_) return exited_->async_wait(boost::asio::posix::stream_descriptor::wait_read, finish);
  finish({});
}

// ---- the helper ----

namespace {

constexpr uint32_t kMask = IN_CREATE | IN_MODIFY | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_ATTRIB | IN_ONLYDIR;

class Watcher {
 public:
  Watcher(std::string base, bool recursive, size_t max_dirs)
      : base_(std::move(base)), recursive_(recursive), max_dirs_(max_dirs) {}

  [[noreturn]] void fail_out(const Error& e) {
    flush();
    std::string line = "X " + std::to_string(static_cast<int>(e.code)) + " " + std::to_string(e.err) + " " +
                       hex_encode(e.message()) + "\n";
    (void)write_all(1, line, "answer");
    ::_exit(0);
  }

  void start() {
    inotify_ = UniqueFd(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    if (!inotify_) {
      int err = errno;
      if (err == EMFILE || err == ENFILE)
        fail_out(Error{ErrorCode::limit, err, "the session's inotify instances are used up (max_inotify_instances)"});
      fail_out(Error{ErrorCode::system, err, "inotify_init1"});
    }
    auto dir = open_at(3, base_, O_RDONLY | O_DIRECTORY, kInRoot, "watch " + base_);
    if (!dir) fail_out(dir.error());
    if (auto r = add_tree(dir->get(), "", 0); !r) fail_out(r.error());
    emit("R\n");
    flush();
  }

  [[noreturn]] void run() {
    alignas(struct inotify_event) char buf[65536];
    for (;;) {
      struct pollfd fds[2] = {{inotify_.get(), POLLIN, 0}, {0, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        ::_exit(1);
      }
      if (fds[1].revents) {
        char c;
        ssize_t n = ::read(0, &c, 1);
        if (n <= 0 && !(n < 0 && errno == EINTR)) ::_exit(0);  // the daemon is done
      }
      if (!(fds[0].revents & POLLIN)) continue;
      ssize_t n = ::read(inotify_.get(), buf, sizeof buf);
      if (n <= 0) continue;
      for (char* p = buf; p < buf + n;) {
        auto* ev = reinterpret_cast<struct inotify_event*>(p);
        p += sizeof(struct inotify_event) + ev->len;
        handle(*ev);
      }
      flush();
    }
  }

 private:
  Result<void> add_tree(int dir_fd, const std::string& rel, int depth) {
    if (dirs_.size() >= max_dirs_)
      return fail(ErrorCode::limit, "more than " + std::to_string(max_dirs_) + " directories to watch under " + base_);
    std::string proc = "/proc/self/fd/" + std::to_string(dir_fd);
    int wd = ::inotify_add_watch(inotify_.get(), proc.c_str(), kMask);
    if (wd < 0) {
      int err = errno;
      if (err == ENOSPC)
        return fail(ErrorCode::limit, "the session's inotify watches are used up (max_inotify_watches)", err);
      if (err == EACCES) return fail(ErrorCode::permission_denied, "watch " + display(rel), err);
      return fail(ErrorCode::system, "watch " + display(rel), err);
    }
    dirs_[wd] = rel;
    if (!recursive_ || depth >= 64) return {};
    auto stream = DirStream::open(dir_fd, "list " + display(rel));
    if (!stream) return {};  // unreadable: watched, not descended
    std::vector<std::string> names;
    for (;;) {
      auto more = stream->read(names, 4096, "list " + display(rel));
      if (!more || !*more) break;
    }
    for (const auto& name : names) {
      auto child = open_at(dir_fd, name, O_RDONLY | O_DIRECTORY, kBeneath, "watch");
      if (!child) continue;  // not a directory, a symlink, a mount point, unreadable
      if (auto r = add_tree(child->get(), join(rel, name), depth + 1); !r) return r;
    }
    return {};
  }

  static std::string join(const std::string& rel, std::string_view name) {
    return rel.empty() ? std::string(name) : rel + "/" + std::string(name);
  }
  std::string display(const std::string& rel) const { return rel.empty() ? base_ : base_ + "/" + rel; }

  void handle(const struct inotify_event& ev) {
    if (ev.mask & IN_Q_OVERFLOW) {
      emit("O\n");
      return;
    }
    if (ev.mask & IN_IGNORED) {
      dirs_.erase(ev.wd);
      return;
    }
    auto it = dirs_.find(ev.wd);
    if (it == dirs_.end() || ev.len == 0) return;  // events of a watched dir itself: its parent reports them
    std::string rel = join(it->second, std::string_view(ev.name));
    uint32_t ops = 0;
    if (ev.mask & (IN_CREATE | IN_MOVED_TO)) ops |= kWatchCreate;
    if (ev.mask & IN_MODIFY) ops |= kWatchWrite;
    if (ev.mask & IN_DELETE) ops |= kWatchRemove;
    if (ev.mask & IN_MOVED_FROM) ops |= kWatchRename;
    if (ev.mask & IN_ATTRIB) ops |= kWatchChmod;
    if (!ops) return;
    emit("E " + std::to_string(ops) + " " + hex_encode(rel) + "\n");
    if (recursive_ && (ev.mask & IN_ISDIR) && (ev.mask & (IN_CREATE | IN_MOVED_TO))) {
      auto dir = open_at(3, base_ + "/" + rel, O_RDONLY | O_DIRECTORY, kInRoot, "watch");
      if (dir) {
        auto r = add_tree(dir->get(), rel, static_cast<int>(std::count(rel.begin(), rel.end(), '/')) + 1);
        if (!r && r.error().code == ErrorCode::limit) fail_out(r.error());
      }
    }
  }

  void emit(std::string_view line) {
    out_.append(line);
    if (out_.size() >= 16384) flush();
  }
  void flush() {
    if (out_.empty()) return;
    if (!write_all(1, out_, "report")) ::_exit(0);  // the daemon is gone
    out_.clear();
  }

  std::string base_;
  bool recursive_;
  size_t max_dirs_;
  UniqueFd inotify_;
  std::map<int, std::string> dirs_;  // watch descriptor -> directory relative to base_
  std::string out_;
};

}  // namespace

void watch_main(int argc, char** argv) {
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  ::signal(SIGPIPE, SIG_IGN);
  uid_t uid = 0;
  gid_t gid = 0;
  size_t max_dirs = 0;
  Watcher usage("", false, 0);
  if (argc != 7 || !parse_number(std::string_view(argv[4]), uid) || !parse_number(std::string_view(argv[5]), gid) ||
      !parse_number(std::string_view(argv[6]), max_dirs))
    usage.fail_out(Error{ErrorCode::internal, 0, "usage: cela __watch-dir DIR RECURSIVE UID GID MAX_DIRS"});
  // As the chosen user from here on: leaving uid 0 drops every capability, so the
  // kernel checks the user's own permissions on what it resolves and watches.
  if (::syscall(SYS_setresgid, gid, gid, gid) != 0 || ::syscall(SYS_setresuid, uid, uid, uid) != 0)
    usage.fail_out(Error{ErrorCode::internal, errno, "drop to the sandbox user"});
  if (uid != 0) ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  Watcher w(argv[2], std::string_view(argv[3]) == "1", max_dirs);
  w.start();
  w.run();
}

}  // namespace cela::session
