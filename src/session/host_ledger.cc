#include "session/host_ledger.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/fs.h"

namespace cela::session {
namespace {

constexpr uint64_t kNoLimit = UINT64_MAX;
constexpr const char* kLockName = ".lock";
constexpr std::string_view kTmpPrefix = ".tmp-";
constexpr uint64_t kHeaderMagic = 0x31726764656c6563;  // "celedgr1"
// The longest an admit waits for the lock: holders keep it for a file write or two
// (well under 1 ms), so a holder stuck with it (stopped, or not cela at all) costs the
// daemon's reactor this much per admit, never a hang.
constexpr auto kLockWait = std::chrono::milliseconds(250);

bool lock_within(int fd) {
  auto until = std::chrono::steady_clock::now() + kLockWait;
  for (auto pause = std::chrono::microseconds(50);; pause = std::min(pause * 2, std::chrono::microseconds(5000))) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= until) {
      errno = EWOULDBLOCK;
      return false;
    }
    std::this_thread::sleep_for(pause);
  }
}

Error lock_failed_error(const std::string& dir) {
  if (errno == EWOULDBLOCK)
    return Error{ErrorCode::capacity_exceeded, 0,
                 "host admission: the grant ledger " + dir + " stayed locked by another process for " +
                     std::to_string(kLockWait.count()) + " ms; try again"};
  return Error{ErrorCode::internal, errno, "flock " + dir + "/" + kLockName};
}

std::unexpected<Error> lock_failed(const std::string& dir) { return std::unexpected(lock_failed_error(dir)); }

std::string holder_name(const HostLedger::Holder& h) {
  return std::to_string(h.pid) + "-" + std::to_string(h.start);
}

// "<pid>-<start>" -> the holder it names; nullopt for any other name.
std::optional<HostLedger::Holder> parse_name(std::string_view name) {
  auto dash = name.find('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  HostLedger::Holder h;
  auto [p, ec] = std::from_chars(name.data(), name.data() + dash, h.pid);
  if (ec != std::errc() || p != name.data() + dash || h.pid <= 0) return std::nullopt;
  const char* end = name.data() + name.size();
  auto [q, ec2] = std::from_chars(name.data() + dash + 1, end, h.start);
  if (ec2 != std::errc() || q != end) return std::nullopt;
  return h;
}

HostGrant min_of(const HostGrant& a, const HostGrant& b) {
  return {std::min(a.memory_mb, b.memory_mb), std::min(a.pids, b.pids), std::min(a.files, b.files)};
}

// Saturating: a holder's file could say anything.
uint64_t plus(uint64_t a, uint64_t b) { return a > kNoLimit - b ? kNoLimit : a + b; }

HostGrant plus_of(const HostGrant& a, const HostGrant& b) {
  return {plus(a.memory_mb, b.memory_mb), plus(a.pids, b.pids), plus(a.files, b.files)};
}

// Saturating at 0: totals a crash left short are set right by the next scan.
HostGrant minus(const HostGrant& a, const HostGrant& b) {
  return {a.memory_mb - std::min(a.memory_mb, b.memory_mb), a.pids - std::min(a.pids, b.pids),
          a.files - std::min(a.files, b.files)};
}

bool alive(const HostLedger::Holder& h) {
  auto now = HostLedger::holder_of(h.pid);
  return now && now->start == h.start;
}

}  // namespace

HostGrant HostGrant::of(const SessionLimits& limits, uint64_t nofile) {
  return of(limits.memory_mb, limits.pids, nofile);
}

Result<void> check_host_tables(const HostGrant& here, const HostGrant& elsewhere, const HostGrant& asked,
                               const HostGrant& limit, const std::string& ledger_dir) {
  struct Table {
    const char* what;
    uint64_t here, elsewhere, asked, limit;
  } tables[] = {{"MiB of session memory", here.memory_mb, elsewhere.memory_mb, asked.memory_mb, limit.memory_mb},
                {"session pids", here.pids, elsewhere.pids, asked.pids, limit.pids},
                {"session open files", here.files, elsewhere.files, asked.files, limit.files}};
  for (const Table& t : tables) {
    uint64_t held = plus(t.here, t.elsewhere);
    if (t.asked <= t.limit && held <= t.limit - t.asked) continue;
    std::string holders = t.elsewhere == 0
                              ? std::to_string(t.here) + " " + t.what + " granted to live sessions"
                              : std::to_string(held) + " " + t.what + " granted on this host (" +
                                    std::to_string(t.elsewhere) + " of them held by other cela processes: daemons, " +
                                    "cela run, template builds sharing the ledger " + ledger_dir + ")";
    return fail(ErrorCode::capacity_exceeded, "host admission: " + holders + "; " + std::to_string(t.asked) +
                                                  " more would pass the host's " + std::to_string(t.limit) +
                                                  " (what it has times the overcommit ratio)");
  }
  return {};
}

Result<HostLedger::Holder> HostLedger::holder_of(pid_t pid, const std::string& proc) {
  std::string path = proc + "/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/stat";
  auto stat = read_interface_file(path);
  if (!stat) {
    if (stat.error().err == ENOENT || stat.error().err == ESRCH) return fail(ErrorCode::not_found, "no process " + path);
    return std::unexpected(stat.error());
  }
  // comm (field 2) may hold spaces and parentheses: the fields after it follow the last ')'.
  auto close = stat->rfind(')');
  if (close == std::string::npos) return fail(ErrorCode::system, "cannot parse " + path);
  std::istringstream fields(stat->substr(close + 1));
  std::string state;
  fields >> state;  // field 3
  std::string skip;
  for (int field = 4; field < 22 && fields; ++field) fields >> skip;
  Holder h;
  if (!(fields >> h.start)) return fail(ErrorCode::system, "cannot parse " + path);
  if (state == "Z" || state == "X") return fail(ErrorCode::not_found, "process " + path + " has exited");
  h.pid = pid != 0 ? pid : ::getpid();
  return h;
}

Result<std::unique_ptr<HostLedger>> HostLedger::open(const std::string& dir, std::chrono::milliseconds cache) {
  if (auto made = make_dirs(dir, 0755); !made) return std::unexpected(made.error());
  std::unique_ptr<HostLedger> l(new HostLedger());
  auto self = holder_of(0);
  if (!self) return std::unexpected(self.error());
  l->self_ = *self;
  l->dir_ = dir;
  l->cache_ = cache;
  l->name_ = holder_name(l->self_);
  l->tmp_name_ = std::string(kTmpPrefix) + l->name_;
  l->dir_fd_.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!l->dir_fd_) return sys_fail("open " + dir);
  // Root only: whoever can open the lock file can hold its flock, and every admit of
  // every cela process on the host waits on it (bounded: kLockWait).
  l->lock_fd_.reset(::openat(l->dir_fd_.get(), kLockName, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!l->lock_fd_) return sys_fail("open " + dir + "/" + kLockName);
  if (::fchmod(l->lock_fd_.get(), 0600) != 0) return sys_fail("chmod " + dir + "/" + kLockName);
  return l;
}

HostLedger::~HostLedger() {
  if (!dir_fd_) return;
  std::lock_guard lock(mu_);
  bool locked = lock_within(lock_fd_.get());
  ::unlinkat(dir_fd_.get(), name_.c_str(), 0);
  ::unlinkat(dir_fd_.get(), tmp_name_.c_str(), 0);
  if (locked) {
    // Our share leaves the totals (the strictest limit waits for the next scan).
    if (auto h = read_header()) {
      h->held = minus(h->held, published_);
      write_header(*h);
    }
    ::flock(lock_fd_.get(), LOCK_UN);
  }
}

std::optional<HostLedger::Header> HostLedger::read_header() const {
  uint64_t v[7] = {};
  if (::pread(lock_fd_.get(), v, sizeof v, 0) != static_cast<ssize_t>(sizeof v) || v[0] != kHeaderMagic)
    return std::nullopt;  // a new lock file: the first scan writes it
  return Header{{v[1], v[2], v[3]}, {v[4], v[5], v[6]}};
}

void HostLedger::write_header(const Header& h) {
  uint64_t v[7] = {kHeaderMagic, h.held.memory_mb, h.held.pids, h.held.files,
                   h.limit.memory_mb, h.limit.pids, h.limit.files};
  (void)!::pwrite(lock_fd_.get(), v, sizeof v, 0);
}

Result<void> HostLedger::refresh(bool force) {
  auto now = std::chrono::steady_clock::now();
  auto header = read_header();
  if (header && !force && now - scanned_at_ < cache_) {
    others_ = minus(header->held, published_);
    others_limit_ = header->limit;
    return {};
  }
  UniqueFd scan(::openat(dir_fd_.get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!scan) return sys_fail("open " + dir_);
  DIR* d = ::fdopendir(scan.get());
  if (!d) return sys_fail("open " + dir_);
  scan.release();
  HostGrant held, limit{kNoLimit, kNoLimit, kNoLimit};
  while (dirent* e = ::readdir(d)) {
    std::string_view name = e->d_name;
    bool tmp = name.starts_with(kTmpPrefix);
    auto holder = parse_name(tmp ? name.substr(kTmpPrefix.size()) : name);
    if (!holder || *holder == self_) continue;  // ours, or not a holder's file: left alone
    if (!alive(*holder)) {
      // The holder is gone (or its pid belongs to another process now): no one will
      // write this file again, so removing it under the lock races with nothing.
      ::unlinkat(::dirfd(d), e->d_name, 0);
      continue;
    }
    if (tmp) continue;  // a live holder's next update (it is renamed under the lock)
    UniqueFd f(::openat(::dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (!f) continue;  // gone since readdir: its holder ended
    char buf[256];
    ssize_t n = ::read(f.get(), buf, sizeof buf - 1);
    if (n <= 0) continue;
    buf[n] = '\0';
    std::istringstream in(buf);
    HostGrant h, l;
    if (!(in >> h.memory_mb >> h.pids >> h.files >> l.memory_mb >> l.pids >> l.files)) continue;
    held = {plus(held.memory_mb, h.memory_mb), plus(held.pids, h.pids), plus(held.files, h.files)};
    limit = min_of(limit, l);
  }
  ::closedir(d);
  others_ = held;
  others_limit_ = limit;
  // The totals again from the files of live holders, ours included: what dead holders
  // (or one that died between its file and the totals) left there is gone.
  if (published_limit_) limit = min_of(limit, *published_limit_);
  write_header({{plus(held.memory_mb, published_.memory_mb), plus(held.pids, published_.pids),
                 plus(held.files, published_.files)},
                limit});
  scanned_at_ = now;
  return {};
}

Result<void> HostLedger::publish() {
  std::string text = std::to_string(mine_.memory_mb) + " " + std::to_string(mine_.pids) + " " +
                     std::to_string(mine_.files) + "\n" + std::to_string(limit_.memory_mb) + " " +
                     std::to_string(limit_.pids) + " " + std::to_string(limit_.files) + "\n";
  UniqueFd f(::openat(dir_fd_.get(), tmp_name_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!f) return sys_fail("create " + dir_ + "/" + tmp_name_);
  if (::write(f.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
    return sys_fail("write " + dir_ + "/" + tmp_name_);
  f.reset();
  // The old file goes first: ext4 flushes a file renamed over another (its
  // auto_da_alloc), about 1 ms per update here, against 0.07 ms for a rename to a free
  // name. Every reader holds the flock we hold, so none sees the name missing, and a
  // holder that dies between the two calls holds nothing.
  ::unlinkat(dir_fd_.get(), name_.c_str(), 0);
  if (::renameat(dir_fd_.get(), tmp_name_.c_str(), dir_fd_.get(), name_.c_str()) != 0)
    return sys_fail("rename " + dir_ + "/" + tmp_name_);
  // The totals follow our file in the same turn of the lock.
  Header h = read_header().value_or(Header{plus_of(others_, published_), others_limit_});
  h.held = plus_of(minus(h.held, published_), mine_);
  h.limit = min_of(h.limit, limit_);
  write_header(h);
  published_ = mine_;
  published_limit_ = limit_;
  return {};
}

namespace {
// flock(LOCK_EX) for one scope, waiting at most kLockWait (lock_within).
class Flock {
 public:
  explicit Flock(int fd) : fd_(fd), ok_(lock_within(fd)) {}
  ~Flock() {
    if (ok_) ::flock(fd_, LOCK_UN);
  }
  bool ok() const { return ok_; }

 private:
  int fd_;
  bool ok_ = false;
};
}  // namespace

Result<void> HostLedger::take(const HostGrant& grant, const HostGrant& limit) {
  std::lock_guard lock(mu_);
  Flock flock(lock_fd_.get());
  if (!flock.ok()) return lock_failed(dir_);
  auto scanned_before = scanned_at_;
  if (auto r = refresh(false); !r) return r;
  auto fits = [&] { return check_host_tables(mine_, others_, grant, min_of(limit, others_limit_), dir_); };
  auto ok = fits();
  // A refusal on a kept copy, which may still count holders that died since: read again first.
  if (!ok && scanned_at_ == scanned_before) {
    if (auto r = refresh(true); !r) return r;
    ok = fits();
  }
  if (!ok) return ok;
  HostGrant before = mine_, declared = limit_;
  mine_ = {plus(mine_.memory_mb, grant.memory_mb), plus(mine_.pids, grant.pids), plus(mine_.files, grant.files)};
  limit_ = limit;
  if (auto p = publish(); !p) {
    mine_ = before;
    limit_ = declared;
    return p;
  }
  return {};
}

Result<void> HostLedger::check(const HostGrant& grant, const HostGrant& limit) {
  std::lock_guard lock(mu_);
  Flock flock(lock_fd_.get());
  if (!flock.ok()) return lock_failed(dir_);
  if (auto r = refresh(false); !r) return r;
  auto ok = check_host_tables(mine_, others_, grant, min_of(limit, others_limit_), dir_);
  if (ok) return ok;
  if (auto r = refresh(true); !r) return r;
  return check_host_tables(mine_, others_, grant, min_of(limit, others_limit_), dir_);
}

void HostLedger::give_back(const HostGrant& grant) {
  std::lock_guard lock(mu_);
  mine_.memory_mb -= std::min(mine_.memory_mb, grant.memory_mb);
  mine_.pids -= std::min(mine_.pids, grant.pids);
  mine_.files -= std::min(mine_.files, grant.files);
  Flock flock(lock_fd_.get());
  // Not written: our file overstates what we hold until the next change (others are
  // refused early, never let past the limit).
  if (flock.ok()) (void)publish();
}

Result<void> HostLedger::declare(const HostGrant& limit) {
  std::lock_guard lock(mu_);
  Flock flock(lock_fd_.get());
  if (!flock.ok()) return lock_failed(dir_);
  if (auto r = refresh(false); !r) return r;  // the header, before our share joins it
  limit_ = limit;
  return publish();
}

HostGrant HostLedger::mine() const {
  std::lock_guard lock(mu_);
  return mine_;
}

Result<HostGrant> HostLedger::others() {
  std::lock_guard lock(mu_);
  Flock flock(lock_fd_.get());
  if (!flock.ok()) return lock_failed(dir_);
  if (auto r = refresh(true); !r) return std::unexpected(r.error());
  return others_;
}

}  // namespace cela::session
