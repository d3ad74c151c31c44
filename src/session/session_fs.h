// SessionFs: the daemon's file operations on a running sandbox's root filesystem (the
// Files and Archive API). The daemon runs as host root; sandbox code may have planted
// any symlink, so no path is ever resolved by the host's rules.
//
// Resolution. A path names a location inside the sandbox ("/home/user/x"): it must
// start with '/', hold no NUL and be at most 4096 bytes. Nothing is normalized by string
// manipulation; the kernel resolves it with openat2(2) relative to the sandbox root fd:
//   RESOLVE_IN_ROOT        ".." and absolute symlink targets stop at (are re-rooted to)
//                          the sandbox root: a planted `link -> /etc` or
//                          `link -> ../../../../host` stays inside the sandbox.
//   RESOLVE_NO_MAGICLINKS  no /proc/<pid>/fd-style jumps.
//   RESOLVE_NO_XDEV        no mount point is crossed: only the root overlay is
//                          reachable. The sandbox's /proc, /dev, /dev/shm and every
//                          bind mount (volumes included) are refused (permission_denied):
//                          a write by the daemon into the sandbox's /proc/sys would be a
//                          host write. /tmp and /home are on the overlay.
// Trees (list, remove, export, import) are walked with one fd per directory and each
// child opened beneath it with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, so a rename or a
// symlink swapped in mid-walk can make the walk fail, never leave the tree.
//
// Symlinks. Intermediate components are followed (inside the root). The final component:
// read_file, open_read, list, export_tar and import_tar's destination follow it (inside
// the root); stat reports the link itself (lstat); write_file, mkdir, move and remove act
// on the link itself: a write replaces a symlink with a regular file (rename(2)
// semantics, the link's target is never opened), remove deletes the link, never its
// target. Trailing slashes are ignored ("/a/link/" is "/a/link").
//
// Writable roots. Mutating operations (write, mkdir, move, remove, import) must act in a
// directory that, after resolution, is at or below one of `writable_roots` (default "/",
// everything). The check walks the resolved directory's ".." chain up to the root and
// compares inodes, so `/home/user/link -> /etc` does not turn a write of
// /home/user/link/passwd into a write of /etc/passwd when only /home/user is writable.
// Reads are allowed anywhere in the root.
//
// Ownership. Everything created gets owner_uid:owner_gid (the sandbox's `user`); modes
// are masked with 0777 (setuid, setgid and sticky bits are dropped). No device node,
// fifo or socket is ever created, and special files are never opened for reading.
//
// Errors: not_found (a missing file or parent), invalid_argument (malformed path, wrong
// file type, directory not empty, target exists, a path through a symlink where none is
// allowed, a refused tar entry: the context names it), permission_denied (EACCES/EPERM/
// EROFS, a mount crossing, outside the writable roots), limit (size, entry and depth
// caps; ENOSPC/EDQUOT), system (any other syscall failure).
//
// Concurrency: a SessionFs holds only the root fd and constants; it may be used from
// several threads at once. Operations are not atomic against concurrent changes by the
// sandbox, but every step acts on fds, so a race can make an operation fail or act on
// another location inside the root, never outside it.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/fd.h"

namespace cela::session {

struct FsLimits {
  uint64_t max_file_bytes = 100ull << 20;     // read_file, write_file, one upload
  uint64_t max_archive_bytes = 500ull << 20;  // export: tar stream bytes; import: entry data bytes
  uint64_t max_archive_entries = 100000;      // export and import
  uint64_t max_list_entries = 10000;          // one list() answer
  int max_depth = 256;  // directory nesting walked by list/remove/export/import
};

struct FileInfo {
  std::string name;            // last component of `path` ("/" for the root)
  std::string path;            // as requested; list entries: the listed path + "/" + relative
  std::string type;            // "file", "dir", "symlink" or "other"
  uint64_t size = 0;           // st_size (a symlink: its target's length)
  uint32_t mode = 0;           // permission bits (07777)
  int64_t mtime_ms = 0;        // since the epoch
  std::string symlink_target;  // symlinks only: readlink(2), verbatim
  uint32_t uid = 0, gid = 0;   // owner as the sandbox sees it (set_id_base), else host ids
  uint32_t format = 0;         // st_mode & S_IFMT (which kind of "other")
};

// A streamed export (export_file): what was sent.
struct ExportedFile {
  uint64_t size = 0;
  std::string sha256;  // lower-case hex of the bytes sent (after the export filter)
};

struct WriteResult {
  std::string path;  // as requested
  uint64_t size = 0;
  std::string sha256;  // lower-case hex of the bytes written
};

struct WriteOptions {
  std::optional<uint32_t> mode;  // default: the replaced regular file's mode, else 0644
  // Create missing parent directories (0755, owner) like mkdir -p. Off: a missing parent
  // is not_found, like PUT on a missing collection.
  bool make_parents = false;
  // Extended attributes set on the new file before it takes the target's name (names
  // must be in the `user.` namespace: invalid_argument otherwise).
  std::vector<std::pair<std::string, std::string>> xattrs;
};

// An opened regular file for streaming a download. `fd` is read-only, positioned at 0.
struct OpenedFile {
  UniqueFd fd;
  uint64_t size = 0;
  uint32_t mode = 0;
  int64_t mtime_ms = 0;
};

// An upload in progress: data goes to a fresh temp file (".cela-<random>.tmp", created
// O_EXCL in the target directory, owner and mode already applied) and commit() renames
// it over the target. Dropping an uncommitted upload removes the temp file. The temp
// name is visible to the sandbox while the upload runs; whatever the sandbox does to it
// stays inside the directory it could already write. A daemon killed mid-upload leaves
// the temp file behind.
class FileUpload {
 public:
  FileUpload(FileUpload&&) noexcept;
  FileUpload& operator=(FileUpload&&) noexcept;
  ~FileUpload();

  // limit (and the temp file removed) once the total passes max_file_bytes.
  Result<void> append(std::string_view chunk);
  // Hands the temp file's fd (write-only) to another writer, a process charged to the
  // session (session/upload.h). From then on append() only counts and hashes what that
  // writer is given; commit() and dropping work as before.
  Result<UniqueFd> hand_over();
  // The path as requested.
  std::string_view path() const;
  // Atomically replaces the target (rename(2): a symlink there is replaced, not followed;
  // a directory there is invalid_argument). Call once.
  Result<WriteResult> commit();

 private:
  friend class SessionFs;
  struct State;
  explicit FileUpload(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

class SessionFs {
 public:
  // root: an O_PATH|O_DIRECTORY fd of the sandbox's root directory; the daemon opens
  // /proc/<init host pid>/root (the overlay root as the sandbox sees it). SessionFs owns it.
  // owner_uid/gid: the host ids created files get (the sandbox's `user`).
  // writable_roots: sandbox paths under which mutations are allowed ("/" for all); a
  // root that does not exist matches nothing.
  SessionFs(UniqueFd root, uid_t owner_uid, gid_t owner_gid, FsLimits limits = {},
            std::vector<std::string> writable_roots = {"/"});

  // Writes `data` atomically (temp file + rename). mode is masked with 0777.
  Result<WriteResult> write_file(std::string_view path, std::string_view data,
                                 const WriteOptions& options = {});
  // The streaming form of write_file, for large bodies.
  Result<FileUpload> open_upload(std::string_view path, const WriteOptions& options = {});

  // The whole content of a regular file (symlinks followed inside the root); limit past
  // max_file_bytes; invalid_argument for a directory or a special file.
  Result<std::string> read_file(std::string_view path);
  // The same checks without the size cap, for streaming: the caller reads the fd.
  Result<OpenedFile> open_read(std::string_view path);

  // lstat semantics for the final component.
  Result<FileInfo> stat(std::string_view path);
  // The entries below a directory (symlink followed inside the root), pre-order, each
  // directory's entries sorted by name; depth 1 = direct children. Symlinked directories
  // are listed as symlinks and not descended; mount points are listed, not descended.
  // depth is capped at max_depth. limit past max_list_entries; invalid_argument for
  // depth < 1 or a non-directory.
  Result<std::vector<FileInfo>> list(std::string_view path, int depth = 1);

  // The path with every symlink resolved inside the root, lexically clean ("/a/b"), like
  // realpath(3) run inside the sandbox; not_found when a component is missing,
  // invalid_argument for a loop (more than 40 links).
  Result<std::string> real_path(std::string_view path);
  // The extended attributes of a regular file or directory whose names start with
  // `prefix` (a `user.` prefix; at most 64 of them, values up to 4 KiB), the prefix
  // removed; none for symlinks and special files. lstat semantics, as stat().
  Result<std::vector<std::pair<std::string, std::string>>> xattrs(std::string_view path, std::string_view prefix);

  // Creates a directory (0755, owner). parents: missing parents too, and an existing
  // directory is fine; otherwise an existing entry is invalid_argument. As with
  // `mkdir -p`, nothing is created through a dangling symlink (not_found).
  Result<void> mkdir(std::string_view path, bool parents = false);
  // rename(2) within the root. overwrite=false: an existing `to` is invalid_argument.
  Result<void> move(std::string_view from, std::string_view to, bool overwrite = false);
  // Removes a file, symlink or empty directory; recursive: a whole tree, never following
  // a symlink and never crossing a mount point (the walk fails there instead).
  Result<void> remove(std::string_view path, bool recursive = false);

  // Streams a tar (pax) of the directory's contents (entry names relative to it) to
  // `sink`: regular files, directories and symlinks (stored as symlinks, never
  // followed); special files and mount points are skipped; hard links are stored as
  // separate files; uid/gid are stored as 0. limit once the stream would pass
  // max_archive_bytes or the entries max_archive_entries; a sink error is returned as is.
  // An empty `sink` only checks the export policy of `dir`.
  Result<void> export_tar(std::string_view dir,
                          const std::function<Result<void>(std::string_view chunk)>& sink);
  // Extracts a tar (optionally gzip/bzip2/xz/zstd compressed, decoders built into
  // libarchive only) read from `source` into the existing directory `dir`. `source`
  // returns the next chunk, an empty view at EOF; a chunk must stay valid until the next
  // call. Returns the number of entries extracted. Refused entries (invalid_argument,
  // naming the entry): absolute names, any ".." component, devices, fifos, sockets,
  // symlinks with an absolute target or one that leaves `dir` lexically, hard links whose
  // target is absolute, has "..", or is not an existing file under `dir`. Every entry is
  // created beneath `dir` without following any symlink (an earlier entry's symlink, or
  // one the sandbox planted, cannot be walked through: invalid_argument). Files and
  // symlinks replace existing ones; an existing directory is kept as it is; a created
  // directory gets the entry's mode (0755 if none). limit past max_archive_bytes of entry
  // data or max_archive_entries. Not transactional: entries extracted before a failure
  // stay.
  Result<uint64_t> import_tar(std::string_view dir,
                              const std::function<Result<std::string_view>()>& source);
  // Streams a regular file to `sink` in chunks of at most 64 KiB, with the checks of
  // read_file (export policy, owner's permissions, size cap max_file_bytes: limit
  // before the first byte when the file is larger, or once it grows past it). With an
  // export filter the file is read whole (it needs all of it) and sent in one chunk. A
  // sink error is returned as is; nothing is sent when the file is empty.
  Result<ExportedFile> export_file(std::string_view path,
                                   const std::function<Result<void>(std::string_view chunk)>& sink);

  // Asked before import_tar writes a regular file of the given size: an error refuses
  // the entry (the archive import helper checks its session's free disk and memory, so
  // a file that cannot fit fails cleanly instead of meeting the OOM killer).
  void set_room_check(std::function<Result<void>(uint64_t bytes)> check) { room_check_ = std::move(check); }

  // Mutations respect the owner's permissions (API.md "File policy"): the directory a
  // file is created in, replaced in or removed from must be writable by owner_uid/gid
  // by its mode bits (owner, group, other), and in a sticky directory an entry of
  // another owner is not replaced or removed: permission_denied, as the sandbox user
  // would get. Off by default (a sandbox user that is root inside passes anyway).
  // On, reads act as the owner too: a file is read (read_file, open_read, export_file)
  // only when its mode bits let the owner read it, a directory is listed only when it
  // may read and search it, and the directories of the path as given (the resolved
  // parent and its ancestors) must be searchable by the owner for any operation. Group
  // rights use the owner's primary group only.
  void respect_owner_permissions(bool on) { as_owner_ = on; }

  // Host ids of the sandbox are inside ids + `base` (its id slot): FileInfo's uid/gid
  // then report inside ids (65534, "nobody", for a host id outside the slot).
  void set_id_base(uint32_t base) { id_base_ = base; }
  // The sandbox's account name of an inside uid or gid, from its /etc/passwd and
  // /etc/group (read once per SessionFs, at most 1 MiB each); the number as text when
  // it has none. 0 is always "root".
  std::string user_name(uint32_t uid) const;
  std::string group_name(uint32_t gid) const;
  // Who this view acts as, for callers that resolve paths relative to a home
  // (informational: SessionFs itself takes absolute paths only).
  void set_account(std::string name, std::string home) {
    account_name_ = std::move(name);
    home_ = std::move(home);
  }
  const std::string& account_name() const { return account_name_; }
  const std::string& home() const { return home_; }
  // Whether an archive may be imported into directory `dir`: within the writable
  // roots and (respect_owner_permissions) writable by the owner.
  Result<void> check_import_target(std::string_view dir) const;

  // Exports (read_file, open_read, export_tar): the resolved directory must be at or
  // below one of `roots` (policy_denied otherwise; "/" for all), and a final component
  // that is a symlink is not followed (policy_denied: ask for its target). `filter`, when
  // set, sees each exported regular file whole (read_file's data, each archive entry)
  // and returns the bytes to send (redacted) or an error (refused); archive entries
  // larger than max_file_bytes are then refused (limit) since they cannot be scanned.
  using ExportFilter = std::function<Result<std::string>(std::string_view path, std::string data)>;
  bool has_export_filter() const { return bool(export_filter_); }
  void set_export_policy(std::vector<std::string> roots, ExportFilter filter) {
    export_roots_ = std::move(roots);
    export_filter_ = std::move(filter);
  }

 private:
  struct ParentDir {
    UniqueFd dir;      // O_PATH fd of the resolved parent directory
    std::string name;  // final component, never empty, "." or ".."
  };
  Result<UniqueFd> open_in_root(std::string_view path, int flags) const;
  // The parent directory of `path` and its final component; make_parents creates
  // missing ancestors. writable: also checks the parent against the writable roots.
  Result<ParentDir> open_parent(std::string_view path, bool writable, bool make_parents) const;
  Result<UniqueFd> make_dirs(std::string_view path) const;
  Result<void> check_writable(int dir_fd, std::string_view path) const;
  // Whether the resolved directory is at or below one of `roots`.
  Result<bool> within(int dir_fd, std::string_view path, const std::vector<std::string>& roots) const;
  Result<void> check_owner_may_write(int dir_fd, std::string_view path) const;
  bool owner_may_write(const struct stat& dir) const;
  // Whether the owner has `bit` (4 read, 2 write, 1 search) on `st` by its mode bits.
  bool owner_may(const struct stat& st, unsigned bit) const;
  // as_owner_: every directory from `dir_fd` up to the root is searchable by the owner.
  Result<void> check_owner_may_reach(int dir_fd, std::string_view path) const;
  // as_owner_: the owner may read the opened inode (`dir`: and search it).
  Result<void> check_owner_may_read(const struct stat& st, std::string_view path, bool dir) const;
  std::string id_name(uint32_t id, bool group) const;
  Result<void> check_exportable(int dir_fd, std::string_view path) const;
  bool exports_everything() const;
  // Creates directory `name` in `dir_fd` with `mode`, owned by the owner (EEXIST is
  // returned as an error with err == EEXIST).
  Result<void> make_dir_at(int dir_fd, const std::string& name, uint32_t mode,
                           std::string_view what) const;
  // A temp file in `dir` (owner and `mode` applied) to be renamed over `name`.
  Result<FileUpload> start_upload(UniqueFd dir, std::string name, std::string path, uint32_t mode,
                                  uint64_t max_bytes,
                                  const std::vector<std::pair<std::string, std::string>>& xattrs = {}) const;
  // FileInfo's host ids to inside ids (set_id_base).
  void localize(FileInfo& info) const;
  static constexpr uint32_t kIdsPerSandbox = 65536;  // a sandbox's id slot (jail/userns.h)

  struct TarImport;  // fs_tar.cc

  UniqueFd root_;
  uid_t owner_uid_;
  gid_t owner_gid_;
  FsLimits limits_;
  std::vector<std::string> writable_roots_;
  std::function<Result<void>(uint64_t)> room_check_;
  bool as_owner_ = false;
  std::vector<std::string> export_roots_{"/"};
  ExportFilter export_filter_;
  uint32_t id_base_ = 0;
  std::string account_name_, home_;
  // /etc/passwd and /etc/group of the sandbox, read on first use.
  mutable std::once_flag names_once_;
  mutable std::map<uint32_t, std::string> user_names_, group_names_;
};

}  // namespace cela::session
