// SessionFs file operations: path checks, resolution in the sandbox root, the writable
// roots check, uploads, reads, stat, list, mkdir, move, remove. Tar is in fs_tar.cc.
#include "session/session_fs.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>

#include "common/fs.h"
#include "session/fs_internal.h"

namespace cela::session {

using namespace fs_detail;

namespace {

// "/a/b//" -> "/a/b"; "///" -> "/".
std::string_view strip_trailing_slashes(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  return path;
}

struct SplitPath {
  std::string parent;  // "/" for a child of the root
  std::string name;    // empty for the root itself
};

// Splits at the last '/' only; ".." and symlinks are left to the kernel.
SplitPath split_path(std::string_view path) {
  path = strip_trailing_slashes(path);
  if (path == "/") return {"/", ""};
  size_t slash = path.rfind('/');
  std::string parent(path.substr(0, slash));
  if (parent.empty()) parent = "/";
  return {std::move(parent), std::string(path.substr(slash + 1))};
}

bool is_dot_or_dotdot(std::string_view name) {
  return name == "." || name == "..";
}

// The path of an entry `name` inside the directory at `dir_path`.
std::string child_path(std::string_view dir_path, std::string_view name) {
  std::string out(strip_trailing_slashes(dir_path));
  if (out != "/") out += '/';
  out += name;
  return out;
}

FileInfo info_from(const struct stat& st, std::string name, std::string path) {
  FileInfo info;
  info.name = std::move(name);
  info.path = std::move(path);
  info.type = type_name(st.st_mode);
  info.size = static_cast<uint64_t>(st.st_size);
  info.mode = st.st_mode & 07777;
  info.mtime_ms = mtime_ms(st);
  info.uid = st.st_uid;
  info.gid = st.st_gid;
  info.format = st.st_mode & S_IFMT;
  return info;
}

// The components of a path, in order ("" and "." dropped; ".." kept).
std::deque<std::string> components(std::string_view path) {
  std::deque<std::string> out;
  for (std::string_view c : path_components(path)) out.emplace_back(c);
  return out;
}

std::string joined(const std::vector<std::string>& parts) {
  if (parts.empty()) return "/";
  std::string out;
  for (const auto& p : parts) out += "/" + p;
  return out;
}

// Reads `fd` to its end in chunks, failing with limit once more than `cap` bytes came.
Result<void> read_chunks(int fd, uint64_t cap, std::string_view path,
                         const std::function<Result<void>(std::string_view)>& each) {
  char buf[65536];
  uint64_t total = 0;
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fs_fail("read " + std::string(path));
    }
    if (n == 0) return {};
    // The file may grow while we read it.
    if (static_cast<uint64_t>(n) > cap - total)
      return fail(ErrorCode::limit, "file larger than " + std::to_string(cap) + " bytes: " + std::string(path));
    total += static_cast<uint64_t>(n);
    if (auto r = each(std::string_view(buf, static_cast<size_t>(n))); !r) return r;
  }
}

bool same_inode(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Visits the directory `dir_fd` and each ancestor up to the sandbox root (`root_st`;
// every directory reached through kInRoot is below it; the host's "/", its own parent,
// ends the walk too) until `visit` answers true (then true) or the root is passed
// (false).
Result<bool> walk_up(int dir_fd, const struct stat& root_st, std::string_view path,
                     const std::function<Result<bool>(const struct stat&)>& visit) {
  auto cur = dup_fd(dir_fd, "check " + std::string(path));
  if (!cur) return std::unexpected(cur.error());
  for (int step = 0; step < 4096; ++step) {
    auto st = stat_fd(cur->get(), "check " + std::string(path));
    if (!st) return std::unexpected(st.error());
    auto stop = visit(*st);
    if (!stop || *stop) return stop;
    if (same_inode(*st, root_st)) break;
    int parent = ::openat(cur->get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (parent < 0) return fs_fail("check " + std::string(path));
    UniqueFd up(parent);
    auto up_st = stat_fd(up.get(), "check " + std::string(path));
    if (!up_st) return std::unexpected(up_st.error());
    if (same_inode(*up_st, *st)) break;
    *cur = std::move(up);
  }
  return false;
}

}  // namespace

// ---- FileUpload ----

struct FileUpload::State {
  UniqueFd dir;      // the target's directory (O_PATH)
  std::string name;  // the target's name in `dir`
  std::string temp;  // the temp file's name in `dir`, empty once renamed or removed
  UniqueFd file;     // the temp file, write-only
  std::string path;  // as requested, for results and errors
  uint64_t size = 0;
  uint64_t max_bytes = 0;
  bool handed_over = false;  // another process writes `file`; append() only counts
  Sha256 hash;

  void discard() {
    if (!temp.empty()) ::unlinkat(dir.get(), temp.c_str(), 0);
    temp.clear();
    file.reset();
  }
  ~State() { discard(); }
};

FileUpload::FileUpload(std::unique_ptr<State> state) : state_(std::move(state)) {}
FileUpload::FileUpload(FileUpload&&) noexcept = default;
FileUpload& FileUpload::operator=(FileUpload&&) noexcept = default;
FileUpload::~FileUpload() = default;

Result<void> FileUpload::append(std::string_view chunk) {
  if (!state_ || state_->temp.empty()) return fail(ErrorCode::internal, "upload already finished");
  State& s = *state_;
  if (chunk.size() > s.max_bytes - s.size) {
    s.discard();
    return fail(ErrorCode::limit,
                "file larger than " + std::to_string(s.max_bytes) + " bytes: " + s.path);
  }
  if (!s.handed_over) {
    if (auto r = write_all(s.file.get(), chunk, "write " + s.path); !r) {
      s.discard();
      return r;
    }
  }
  s.size += chunk.size();
  s.hash.update(chunk);
  return {};
}

std::string_view FileUpload::path() const { return state_ ? std::string_view(state_->path) : std::string_view(); }

Result<UniqueFd> FileUpload::hand_over() {
  if (!state_ || state_->temp.empty() || state_->handed_over)
    return fail(ErrorCode::internal, "upload already finished or handed over");
  state_->handed_over = true;
  return std::move(state_->file);
}

Result<WriteResult> FileUpload::commit() {
  if (!state_ || state_->temp.empty()) return fail(ErrorCode::internal, "upload already finished");
  State& s = *state_;
  // rename(2) replaces the name itself: a symlink there is replaced, never followed.
  if (::renameat(s.dir.get(), s.temp.c_str(), s.dir.get(), s.name.c_str()) != 0) {
    int err = errno;
    s.discard();
    return fs_fail("write " + s.path, err);
  }
  s.temp.clear();
  s.file.reset();
  return WriteResult{s.path, s.size, s.hash.hex_final()};
}

// ---- SessionFs ----

SessionFs::SessionFs(UniqueFd root, uid_t owner_uid, gid_t owner_gid, FsLimits limits,
                     std::vector<std::string> writable_roots)
    : root_(std::move(root)),
      owner_uid_(owner_uid),
      owner_gid_(owner_gid),
      limits_(limits),
      writable_roots_(std::move(writable_roots)) {}

Result<UniqueFd> SessionFs::open_in_root(std::string_view path, int flags) const {
  return open_at(root_.get(), std::string(path), flags, kInRoot, "open " + std::string(path));
}

Result<void> SessionFs::check_writable(int dir_fd, std::string_view path) const {
  if (as_owner_)
    if (auto r = check_owner_may_write(dir_fd, path); !r) return r;
  auto in = within(dir_fd, path, writable_roots_);
  if (!in) return std::unexpected(in.error());
  if (*in) return {};
  return fail(ErrorCode::policy_denied, "outside the writable paths: " + std::string(path));
}

bool SessionFs::owner_may(const struct stat& st, unsigned bit) const {
  mode_t m = st.st_mode;
  unsigned bits = st.st_uid == owner_uid_ ? (m >> 6) : st.st_gid == owner_gid_ ? (m >> 3) : m;
  return (bits & bit) != 0;
}

bool SessionFs::owner_may_write(const struct stat& dir) const { return owner_may(dir, 2); }

Result<void> SessionFs::check_owner_may_reach(int dir_fd, std::string_view path) const {
  if (!as_owner_) return {};
  auto root_st = stat_fd(root_.get(), "stat the sandbox root");
  if (!root_st) return std::unexpected(root_st.error());
  auto r = walk_up(dir_fd, *root_st, path, [&](const struct stat& st) -> Result<bool> {
    if (owner_may(st, 1)) return false;
    return fail(ErrorCode::permission_denied,
                "the sandbox user may not search a directory on the way to " + std::string(path) + " (its permissions)");
  });
  if (!r) return std::unexpected(r.error());
  return {};
}

Result<void> SessionFs::check_owner_may_read(const struct stat& st, std::string_view path, bool dir) const {
  if (!as_owner_) return {};
  if (owner_may(st, 4) && (!dir || owner_may(st, 1))) return {};
  return fail(ErrorCode::permission_denied, "the sandbox user may not read " + std::string(path) + " (its permissions)");
}

Result<void> SessionFs::check_owner_may_write(int dir_fd, std::string_view path) const {
  if (auto r = check_owner_may_reach(dir_fd, path); !r) return r;
  auto st = stat_fd(dir_fd, "check " + std::string(path));
  if (!st) return std::unexpected(st.error());
  mode_t m = st->st_mode;
  if (!owner_may_write(*st))
    return fail(ErrorCode::permission_denied,
                "the sandbox user may not write in the directory of " + std::string(path) + " (its permissions)");
  if ((m & S_ISVTX) && st->st_uid != owner_uid_) {
    // Sticky: only the entry's owner may replace or remove it.
    SplitPath split = split_path(path);
    struct stat entry {};
    if (!split.name.empty() && ::fstatat(dir_fd, split.name.c_str(), &entry, AT_SYMLINK_NOFOLLOW) == 0 &&
        entry.st_uid != owner_uid_)
      return fail(ErrorCode::permission_denied,
                  std::string(path) + " belongs to another user in a sticky directory");
  }
  return {};
}

Result<void> SessionFs::check_import_target(std::string_view dir) const {
  if (auto r = check_path(dir); !r) return r;
  auto fd = open_in_root(dir, O_PATH | O_DIRECTORY);
  if (!fd) return std::unexpected(fd.error());
  auto st = stat_fd(fd->get(), "check " + std::string(dir));
  if (!st) return std::unexpected(st.error());
  if (as_owner_ && !owner_may_write(*st)) {
    return fail(ErrorCode::permission_denied,
                "the sandbox user may not write in " + std::string(dir) + " (its permissions)");
  }
  auto in = within(fd->get(), dir, writable_roots_);
  if (!in) return std::unexpected(in.error());
  if (!*in) return fail(ErrorCode::policy_denied, "outside the writable paths: " + std::string(dir));
  return {};
}

bool SessionFs::exports_everything() const {
  return std::ranges::find(export_roots_, "/") != export_roots_.end();
}

Result<void> SessionFs::check_exportable(int dir_fd, std::string_view path) const {
  if (exports_everything()) return {};
  auto in = within(dir_fd, path, export_roots_);
  if (!in) return std::unexpected(in.error());
  if (*in) return {};
  return fail(ErrorCode::policy_denied, "outside the exportable paths: " + std::string(path));
}

Result<bool> SessionFs::within(int dir_fd, std::string_view path, const std::vector<std::string>& roots) const {
  if (std::ranges::find(roots, "/") != roots.end()) return true;
  std::vector<struct stat> allowed;
  for (const auto& root : roots) {
    if (!check_path(root)) continue;
    auto fd = open_in_root(root, O_PATH | O_DIRECTORY);
    if (!fd) continue;  // a missing writable root matches nothing
    auto st = stat_fd(fd->get(), "stat " + root);
    if (st) allowed.push_back(*st);
  }
  auto root_st = stat_fd(root_.get(), "stat the sandbox root");
  if (!root_st) return std::unexpected(root_st.error());

  // Walk up from the resolved directory: it is writable if it or an ancestor is a
  // writable root.
  return walk_up(dir_fd, *root_st, path, [&](const struct stat& st) -> Result<bool> {
    return std::ranges::any_of(allowed, [&](const struct stat& a) { return same_inode(st, a); });
  });
}

Result<void> SessionFs::make_dir_at(int dir_fd, const std::string& name, uint32_t mode,
                                    std::string_view what) const {
  if (::mkdirat(dir_fd, name.c_str(), 0700) != 0) return fs_fail("mkdir " + std::string(what));
  // Owner and mode through an fd of the new directory (never a symlink swapped in).
  auto fd = open_at(dir_fd, name, O_RDONLY | O_DIRECTORY, kBeneath, "mkdir " + std::string(what));
  if (!fd) return std::unexpected(fd.error());
  // chown before chmod: chown may clear mode bits.
  if (::fchown(fd->get(), owner_uid_, owner_gid_) != 0)
    return fs_fail("chown " + std::string(what));
  if (::fchmod(fd->get(), mode & 0777) != 0) return fs_fail("chmod " + std::string(what));
  return {};
}

Result<UniqueFd> SessionFs::make_dirs(std::string_view path) const {
  if (auto r = check_path(path); !r) return std::unexpected(r.error());
  auto cur = open_in_root("/", O_PATH | O_DIRECTORY);
  if (!cur) return cur;
  // Each prefix is resolved again from the root by the kernel ("/a/link/..": the
  // kernel decides where it leads); only missing plain names are created.
  std::string prefix;
  size_t depth = 0;
  for (size_t pos = 0; pos < path.size();) {
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string_view comp = path.substr(pos, end - pos);
    pos = end + 1;
    if (comp.empty()) continue;
    if (++depth > static_cast<size_t>(limits_.max_depth))
      return fail(ErrorCode::limit, "path too deep: " + std::string(path));
    prefix += '/';
    prefix += comp;
    auto next = open_in_root(prefix, O_PATH | O_DIRECTORY);
    if (!next && next.error().err == ENOENT && !is_dot_or_dotdot(comp)) {
      if (auto r = check_writable(cur->get(), prefix); !r) return std::unexpected(r.error());
      auto made = make_dir_at(cur->get(), std::string(comp), 0755, prefix);
      if (!made && made.error().err != EEXIST) return std::unexpected(made.error());
      next = open_in_root(prefix, O_PATH | O_DIRECTORY);
    }
    if (!next) return next;
    cur = std::move(next);
  }
  return cur;
}

Result<SessionFs::ParentDir> SessionFs::open_parent(std::string_view path, bool writable,
                                                    bool make_parents) const {
  if (auto r = check_path(path); !r) return std::unexpected(r.error());
  SplitPath split = split_path(path);
  if (split.name.empty() || is_dot_or_dotdot(split.name))
    return fail(ErrorCode::invalid_argument, "not a name in a directory: " + std::string(path));
  auto dir =
      make_parents ? make_dirs(split.parent) : open_in_root(split.parent, O_PATH | O_DIRECTORY);
  if (!dir) return std::unexpected(dir.error());
  if (writable)
    if (auto r = check_writable(dir->get(), path); !r) return std::unexpected(r.error());
  return ParentDir{std::move(*dir), std::move(split.name)};
}

Result<FileUpload> SessionFs::start_upload(UniqueFd dir, std::string name, std::string path,
                                           uint32_t mode, uint64_t max_bytes,
                                           const std::vector<std::pair<std::string, std::string>>& xattrs) const {
  for (const auto& [key, value] : xattrs)
    if (!key.starts_with("user.") || key.size() == 5 || key.size() > 255 || key.find('\0') != std::string::npos ||
        value.size() > 65536)
      return fail(ErrorCode::invalid_argument, "not a user attribute: " + key);
  auto state = std::make_unique<FileUpload::State>();
  state->dir = std::move(dir);
  state->name = std::move(name);
  state->path = std::move(path);
  state->max_bytes = max_bytes;
  // O_EXCL on a fresh name: the file is ours, created in the resolved directory.
  for (int attempt = 0;; ++attempt) {
    std::string temp = temp_name();
    int fd = ::openat(state->dir.get(), temp.c_str(),
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      state->file.reset(fd);
      state->temp = std::move(temp);
      break;
    }
    if (errno != EEXIST || attempt == 16) return fs_fail("write " + state->path);
  }
  // chown before chmod: chown clears setuid/setgid bits (there are none: mode & 0777).
  if (::fchown(state->file.get(), owner_uid_, owner_gid_) != 0)
    return fs_fail("chown " + state->path);
  if (::fchmod(state->file.get(), mode & 0777) != 0) return fs_fail("chmod " + state->path);
  for (const auto& [key, value] : xattrs)
    if (::fsetxattr(state->file.get(), key.c_str(), value.data(), value.size(), 0) != 0)
      return fs_fail("set attribute " + key + " of " + state->path);
  return FileUpload(std::move(state));
}

Result<FileUpload> SessionFs::open_upload(std::string_view path, const WriteOptions& options) {
  if (options.mode && *options.mode > 07777)
    return fail(ErrorCode::invalid_argument, "mode out of range: " + std::to_string(*options.mode));
  auto parent = open_parent(path, /*writable=*/true, options.make_parents);
  if (!parent) return std::unexpected(parent.error());
  uint32_t mode = 0644;
  if (options.mode) {
    mode = *options.mode & 0777;
  } else {
    struct stat st {};
    if (::fstatat(parent->dir.get(), parent->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode))
      mode = st.st_mode & 0777;
  }
  return start_upload(std::move(parent->dir), std::move(parent->name), std::string(path), mode,
                      limits_.max_file_bytes, options.xattrs);
}

Result<WriteResult> SessionFs::write_file(std::string_view path, std::string_view data,
                                          const WriteOptions& options) {
  if (data.size() > limits_.max_file_bytes)
    return fail(ErrorCode::limit, "file larger than " + std::to_string(limits_.max_file_bytes) +
                                      " bytes: " + std::string(path));
  auto upload = open_upload(path, options);
  if (!upload) return std::unexpected(upload.error());
  if (auto r = upload->append(data); !r) return std::unexpected(r.error());
  return upload->commit();
}

Result<OpenedFile> SessionFs::open_read(std::string_view path) {
  if (auto r = check_path(path); !r) return std::unexpected(r.error());
  std::string what = "read " + std::string(path);
  if (as_owner_) {
    // The directories of the file the path leads to (a planted symlink must not lead
    // the owner into a directory it may not search).
    auto real = real_path(path);
    if (!real) return std::unexpected(real.error());
    auto parent = open_parent(*real, /*writable=*/false, /*make_parents=*/false);
    if (!parent) return std::unexpected(parent.error());
    if (auto r = check_owner_may_reach(parent->dir.get(), path); !r) return std::unexpected(r.error());
  }
  if (!exports_everything()) {
    // The resolved parent must be exportable, and the file itself is not a symlink
    // (its target could be anywhere in the root).
    auto parent = open_parent(path, /*writable=*/false, /*make_parents=*/false);
    if (!parent) return std::unexpected(parent.error());
    if (auto r = check_exportable(parent->dir.get(), path); !r) return std::unexpected(r.error());
    struct stat lst {};
    if (::fstatat(parent->dir.get(), parent->name.c_str(), &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(lst.st_mode))
      return fail(ErrorCode::policy_denied, "a symlink is not exported (ask for its target): " + std::string(path));
  }
  // O_PATH first: opening a fifo or a device for reading would block or reach a driver.
  auto path_fd = open_at(root_.get(), std::string(path), O_PATH, kInRoot, what);
  if (!path_fd) return std::unexpected(path_fd.error());
  auto st = stat_fd(path_fd->get(), what);
  if (!st) return std::unexpected(st.error());
  if (S_ISDIR(st->st_mode))
    return fail(ErrorCode::invalid_argument, "is a directory: " + std::string(path));
  if (!S_ISREG(st->st_mode))
    return fail(ErrorCode::invalid_argument, "not a regular file: " + std::string(path));
  if (auto r = check_owner_may_read(*st, path, false); !r) return std::unexpected(r.error());
  auto fd = reopen(path_fd->get(), O_RDONLY, what);
  if (!fd) return std::unexpected(fd.error());
  return OpenedFile{std::move(*fd), static_cast<uint64_t>(st->st_size), st->st_mode & 07777,
                    mtime_ms(*st)};
}

Result<std::string> SessionFs::read_file(std::string_view path) {
  auto file = open_read(path);
  if (!file) return std::unexpected(file.error());
  if (file->size > limits_.max_file_bytes)
    return fail(ErrorCode::limit, "file larger than " + std::to_string(limits_.max_file_bytes) +
                                      " bytes: " + std::string(path));
  std::string data;
  data.reserve(file->size);
  auto r = read_chunks(file->fd.get(), limits_.max_file_bytes, path, [&](std::string_view chunk) -> Result<void> {
    data.append(chunk);
    return {};
  });
  if (!r) return std::unexpected(r.error());
  if (export_filter_) return export_filter_(path, std::move(data));
  return data;
}

Result<ExportedFile> SessionFs::export_file(std::string_view path,
                                            const std::function<Result<void>(std::string_view chunk)>& sink) {
  ExportedFile out;
  Sha256 hash;
  auto send = [&](std::string_view chunk) -> Result<void> {
    if (chunk.empty()) return {};
    hash.update(chunk);
    out.size += chunk.size();
    return sink(chunk);
  };
  if (export_filter_) {
    auto data = read_file(path);
    if (!data) return std::unexpected(data.error());
    if (auto r = send(*data); !r) return std::unexpected(r.error());
  } else {
    auto file = open_read(path);
    if (!file) return std::unexpected(file.error());
    if (file->size > limits_.max_file_bytes)
      return fail(ErrorCode::limit, "file larger than " + std::to_string(limits_.max_file_bytes) +
                                        " bytes: " + std::string(path));
    if (auto r = read_chunks(file->fd.get(), limits_.max_file_bytes, path, send); !r) return std::unexpected(r.error());
  }
  out.sha256 = hash.hex_final();
  return out;
}

Result<FileInfo> SessionFs::stat(std::string_view path) {
  if (auto r = check_path(path); !r) return std::unexpected(r.error());
  SplitPath split = split_path(path);
  std::string what = "stat " + std::string(path);
  if (split.name.empty() || is_dot_or_dotdot(split.name)) {
    // The root, or a path ending in "." or "..": a directory, never a symlink.
    auto fd = open_at(root_.get(), std::string(path), O_PATH | O_DIRECTORY, kInRoot, what);
    if (!fd) return std::unexpected(fd.error());
    auto st = stat_fd(fd->get(), what);
    if (!st) return std::unexpected(st.error());
    FileInfo info = info_from(*st, split.name.empty() ? "/" : split.name, std::string(path));
    localize(info);
    return info;
  }
  auto parent = open_parent(path, /*writable=*/false, /*make_parents=*/false);
  if (!parent) return std::unexpected(parent.error());
  if (auto r = check_owner_may_reach(parent->dir.get(), path); !r) return std::unexpected(r.error());
  struct stat st {};
  if (::fstatat(parent->dir.get(), parent->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
    return fs_fail(what);
  FileInfo info = info_from(st, parent->name, std::string(path));
  localize(info);
  if (S_ISLNK(st.st_mode)) {
    auto target = read_link_at(parent->dir.get(), parent->name, what);
    if (!target) return std::unexpected(target.error());
    info.symlink_target = std::move(*target);
  }
  return info;
}

namespace {

struct Lister {
  const FsLimits& limits;
  std::vector<FileInfo>& out;
  // Whether a directory's entries may be listed (the owner may read and search it).
  std::function<bool(const struct stat&)> may_list;

  Result<void> list_dir(int dir_fd, const std::string& dir_path, int depth_left) {
    std::string what = "list " + dir_path;
    auto stream = DirStream::open(dir_fd, what);
    if (!stream) return std::unexpected(stream.error());
    std::vector<std::string> names;
    size_t room = static_cast<size_t>(limits.max_list_entries - out.size());
    auto more = stream->read(names, room == SIZE_MAX ? room : room + 1, what);
    if (!more) return std::unexpected(more.error());
    if (names.size() > room)
      return fail(ErrorCode::limit,
                  "more than " + std::to_string(limits.max_list_entries) + " entries: " + dir_path);
    std::ranges::sort(names);
    for (const auto& name : names) {
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;  // removed since readdir
        return fs_fail("stat " + child_path(dir_path, name));
      }
      FileInfo info = info_from(st, name, child_path(dir_path, name));
      if (S_ISLNK(st.st_mode)) {
        auto target = read_link_at(dir_fd, name, "readlink " + info.path);
        if (target) info.symlink_target = std::move(*target);
      }
      std::string path = info.path;
      out.push_back(std::move(info));
      if (!S_ISDIR(st.st_mode) || depth_left <= 1 || !may_list(st)) continue;
      auto child = open_at(dir_fd, name, O_RDONLY | O_DIRECTORY, kBeneath, "list " + path);
      if (!child) {
        // A mount point (EXDEV), or swapped for a symlink or removed meanwhile.
        int err = child.error().err;
        if (err == EXDEV || err == ELOOP || err == ENOENT || err == ENOTDIR) continue;
        return std::unexpected(child.error());
      }
      if (auto r = list_dir(child->get(), path, depth_left - 1); !r) return r;
    }
    return {};
  }
};

}  // namespace

Result<std::vector<FileInfo>> SessionFs::list(std::string_view path, int depth) {
  if (auto r = check_path(path); !r) return std::unexpected(r.error());
  if (depth < 1) return fail(ErrorCode::invalid_argument, "depth must be at least 1");
  depth = std::min(depth, limits_.max_depth);
  auto dir = open_in_root(path, O_RDONLY | O_DIRECTORY);
  if (!dir) return std::unexpected(dir.error());
  if (as_owner_) {
    if (auto r = check_owner_may_reach(dir->get(), path); !r) return std::unexpected(r.error());
    auto st = stat_fd(dir->get(), "list " + std::string(path));
    if (!st) return std::unexpected(st.error());
    if (auto r = check_owner_may_read(*st, path, true); !r) return std::unexpected(r.error());
  }
  std::vector<FileInfo> out;
  Lister lister{limits_, out, [this](const struct stat& st) { return !as_owner_ || (owner_may(st, 4) && owner_may(st, 1)); }};
  if (auto r = lister.list_dir(dir->get(), std::string(strip_trailing_slashes(path)), depth); !r)
    return std::unexpected(r.error());
  for (auto& info : out) localize(info);
  return out;
}

Result<void> SessionFs::mkdir(std::string_view path, bool parents) {
  if (parents) {
    auto dir = make_dirs(path);
    if (!dir) return std::unexpected(dir.error());
    return {};
  }
  auto parent = open_parent(path, /*writable=*/true, /*make_parents=*/false);
  if (!parent) return std::unexpected(parent.error());
  return make_dir_at(parent->dir.get(), parent->name, 0755, path);
}

Result<void> SessionFs::move(std::string_view from, std::string_view to, bool overwrite) {
  auto src = open_parent(from, /*writable=*/true, /*make_parents=*/false);
  if (!src) return std::unexpected(src.error());
  auto dst = open_parent(to, /*writable=*/true, /*make_parents=*/false);
  if (!dst) return std::unexpected(dst.error());
  if (::renameat2(src->dir.get(), src->name.c_str(), dst->dir.get(), dst->name.c_str(),
                  overwrite ? 0 : RENAME_NOREPLACE) != 0)
    return fs_fail("move " + std::string(from) + " to " + std::string(to));
  return {};
}

namespace {

// Empties the directory `dir_fd` (O_RDONLY) without following symlinks or crossing
// mounts. Names are read in batches and removed, until a pass finds none.
Result<void> empty_tree(int dir_fd, const std::string& path, int depth, const FsLimits& limits) {
  if (depth > limits.max_depth) return fail(ErrorCode::limit, "tree too deep: " + path);
  std::string what = "remove " + path;
  auto stream = DirStream::open(dir_fd, what);
  if (!stream) return std::unexpected(stream.error());
  // Bounded even if the sandbox keeps adding entries while we remove them.
  for (int pass = 0; pass < 100000; ++pass) {
    std::vector<std::string> names;
    auto more = stream->read(names, 4096, what);
    if (!more) return std::unexpected(more.error());
    if (names.empty()) return {};
    for (const auto& name : names) {
      std::string child = child_path(path, name);
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return fs_fail("remove " + child);
      }
      if (S_ISDIR(st.st_mode)) {
        auto sub = open_at(dir_fd, name, O_RDONLY | O_DIRECTORY, kBeneath, "remove " + child);
        if (!sub) return std::unexpected(sub.error());
        if (auto r = empty_tree(sub->get(), child, depth + 1, limits); !r) return r;
        if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
          return fs_fail("remove " + child);
      } else if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
        return fs_fail("remove " + child);
      }
    }
    stream->rewind();
  }
  return fail(ErrorCode::limit, "directory keeps changing: " + path);
}

}  // namespace

Result<void> SessionFs::remove(std::string_view path, bool recursive) {
  auto parent = open_parent(path, /*writable=*/true, /*make_parents=*/false);
  if (!parent) return std::unexpected(parent.error());
  std::string what = "remove " + std::string(path);
  int dir = parent->dir.get();
  const char* name = parent->name.c_str();
  struct stat st {};
  if (::fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return fs_fail(what);
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dir, name, 0) != 0) return fs_fail(what);
    return {};
  }
  if (recursive) {
    auto sub = open_at(dir, parent->name, O_RDONLY | O_DIRECTORY, kBeneath, what);
    if (!sub) return std::unexpected(sub.error());
    if (auto r = empty_tree(sub->get(), std::string(strip_trailing_slashes(path)), 1, limits_); !r)
      return r;
  }
  if (::unlinkat(dir, name, AT_REMOVEDIR) != 0) return fs_fail(what);
  return {};
}

Result<std::string> SessionFs::real_path(std::string_view path) {
  if (auto r = check_path(path); !r) return std::unexpected(r.error());
  std::string what = "resolve " + std::string(path);
  std::deque<std::string> todo = components(path);
  std::vector<std::string> done;
  int links = 0;
  while (!todo.empty()) {
    std::string c = std::move(todo.front());
    todo.pop_front();
    if (c == "..") {
      if (!done.empty()) done.pop_back();
      continue;
    }
    auto dir = open_in_root(joined(done), O_PATH | O_DIRECTORY);
    if (!dir) return std::unexpected(dir.error());
    struct stat st {};
    if (::fstatat(dir->get(), c.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return fs_fail(what);
    if (!S_ISLNK(st.st_mode)) {
      done.push_back(std::move(c));
      continue;
    }
    if (++links > 40) return fail(ErrorCode::invalid_argument, "too many levels of symbolic links: " + std::string(path));
    auto target = read_link_at(dir->get(), c, what);
    if (!target) return std::unexpected(target.error());
    if (target->starts_with('/')) done.clear();
    auto more = components(*target);
    todo.insert(todo.begin(), more.begin(), more.end());
  }
  return joined(done);
}

Result<std::vector<std::pair<std::string, std::string>>> SessionFs::xattrs(std::string_view path,
                                                                         std::string_view prefix) {
  if (auto r = check_path(path); !r) return std::unexpected(r.error());
  std::string what = "attributes of " + std::string(path);
  std::vector<std::pair<std::string, std::string>> out;
  SplitPath split = split_path(path);
  Result<UniqueFd> at = std::unexpected(Error{});
  if (split.name.empty() || is_dot_or_dotdot(split.name)) {
    at = open_in_root(path, O_PATH | O_DIRECTORY);
  } else {
    auto parent = open_parent(path, /*writable=*/false, /*make_parents=*/false);
    if (!parent) return std::unexpected(parent.error());
    at = open_at(parent->dir.get(), parent->name, O_PATH, kBeneath, what);
    // A symlink (or a mount point) as the final component: nothing to report.
    if (!at && (at.error().err == ELOOP || at.error().err == EXDEV)) return out;
  }
  if (!at) return std::unexpected(at.error());
  auto st = stat_fd(at->get(), what);
  if (!st) return std::unexpected(st.error());
  if (!S_ISREG(st->st_mode) && !S_ISDIR(st->st_mode)) return out;
  auto fd = reopen(at->get(), O_RDONLY, what);
  if (!fd) return std::unexpected(fd.error());
  std::string names(65536, '\0');
  ssize_t n = ::flistxattr(fd->get(), names.data(), names.size());
  if (n < 0) {
    if (errno == ENOTSUP || errno == ERANGE) return out;
    return fs_fail(what);
  }
  names.resize(static_cast<size_t>(n));
  std::string value(4096, '\0');
  for (size_t pos = 0; pos < names.size() && out.size() < 64;) {
    size_t end = names.find('\0', pos);
    if (end == std::string::npos) end = names.size();
    std::string name = names.substr(pos, end - pos);
    pos = end + 1;
    if (!name.starts_with(prefix) || name.size() == prefix.size()) continue;
    ssize_t got = ::fgetxattr(fd->get(), name.c_str(), value.data(), value.size());
    if (got < 0) continue;  // removed meanwhile, or too large to report
    out.emplace_back(name.substr(prefix.size()), value.substr(0, static_cast<size_t>(got)));
  }
  return out;
}

void SessionFs::localize(FileInfo& info) const {
  if (!id_base_) return;
  auto inside = [this](uint32_t host) -> uint32_t {
    return host >= id_base_ && host - id_base_ < kIdsPerSandbox ? host - id_base_ : 65534;
  };
  info.uid = inside(info.uid);
  info.gid = inside(info.gid);
}

std::string SessionFs::user_name(uint32_t uid) const { return id_name(uid, false); }
std::string SessionFs::group_name(uint32_t gid) const { return id_name(gid, true); }

std::string SessionFs::id_name(uint32_t id, bool group) const {
  if (id == 0) return "root";
  std::call_once(names_once_, [this] {
    auto load = [this](const char* file, std::map<uint32_t, std::string>& names) {
      auto at = open_at(root_.get(), file, O_PATH, kInRoot, "read accounts");
      if (!at) return;
      auto st = stat_fd(at->get(), "read accounts");
      if (!st || !S_ISREG(st->st_mode)) return;
      auto fd = reopen(at->get(), O_RDONLY, "read accounts");
      if (!fd) return;
      std::string text;
      (void)read_chunks(fd->get(), 1 << 20, file, [&](std::string_view chunk) -> Result<void> {
        text.append(chunk);
        return {};
      });
      // name:password:id:... (passwd and group alike); the first line of an id wins.
      for (size_t pos = 0; pos < text.size();) {
        size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        std::string_view line(text.data() + pos, end - pos);
        pos = end + 1;
        size_t a = line.find(':'), b = a == std::string_view::npos ? a : line.find(':', a + 1);
        size_t c = b == std::string_view::npos ? b : line.find(':', b + 1);
        if (c == std::string_view::npos || a == 0) continue;
        uint32_t value = 0;
        auto [p, ec] = std::from_chars(line.data() + b + 1, line.data() + c, value);
        if (ec != std::errc() || p != line.data() + c) continue;
        names.emplace(value, std::string(line.substr(0, a)));
      }
    };
    load("/etc/passwd", user_names_);
    load("/etc/group", group_names_);
  });
  const auto& names = group ? group_names_ : user_names_;
  if (auto it = names.find(id); it != names.end()) return it->second;
  return std::to_string(id);
}

}  // namespace cela::session
