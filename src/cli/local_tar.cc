#include "cli/local_tar.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "common/fd.h"
#include "common/fs.h"
#include "session/tar.h"

namespace cela::cli {
namespace {
namespace fs = std::filesystem;

using session::archive_message;

la_ssize_t append_to_string(archive*, void* client, const void* buffer, size_t length) {
  static_cast<std::string*>(client)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

// ---- pack ----

Result<void> write_header(archive* tar, archive_entry* entry, const std::string& rel) {
  if (archive_write_header(tar, entry) < ARCHIVE_WARN)
    return fail(ErrorCode::system, "tar " + rel + ": " + archive_message(tar));
  return {};
}

void begin_entry(archive_entry* entry, const std::string& rel, const struct stat& st, unsigned type) {
  session::fill_tar_entry(entry, rel, st, type);
}

Result<void> add_file(archive* tar, archive_entry* entry, const fs::path& path,
                      const std::string& rel) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_fail("open " + path.string());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys_fail("stat " + path.string());
  if (!S_ISREG(st.st_mode)) return {};  // replaced meanwhile
  begin_entry(entry, rel, st, AE_IFREG);
  if (auto r = write_header(tar, entry, rel); !r) return r;
  // Exactly st_size bytes: the header already says how many.
  uint64_t remaining = static_cast<uint64_t>(st.st_size);
  char buf[65536];
  while (remaining > 0) {
    ssize_t n = ::read(fd.get(), buf, std::min<uint64_t>(sizeof buf, remaining));
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys_fail("read " + path.string());
    }
    if (n == 0) break;
    if (archive_write_data(tar, buf, static_cast<size_t>(n)) < 0)
      return fail(ErrorCode::system, "tar " + rel + ": " + archive_message(tar));
    remaining -= static_cast<uint64_t>(n);
  }
  if (archive_write_finish_entry(tar) < ARCHIVE_WARN)
    return fail(ErrorCode::system, "tar " + rel + ": " + archive_message(tar));
  return {};
}

// ---- unpack ----

struct Source {
  std::string_view data;
  bool given = false;
  static la_ssize_t read(archive*, void* client, const void** buffer) {
    auto* self = static_cast<Source*>(client);
    if (self->given) return 0;
    self->given = true;
    *buffer = self->data.data();
    return static_cast<la_ssize_t>(self->data.size());
  }
};

std::unexpected<Error> refuse(std::string_view name, std::string_view why) {
  return fail(ErrorCode::invalid_argument,
              "tar entry '" + std::string(name) + "': " + std::string(why));
}

// One component opened beneath `dir` with no symlink followed (openat2: the kernel
// checks, so a link swapped in between two calls is not walked through either).
int open_beneath(int dir, const std::string& name, uint64_t flags, uint64_t mode = 0) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.mode = mode;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, dir, name.c_str(), &how, sizeof how));
}

// The components of an entry name; "" and "." dropped, absolute names and ".." refused.
Result<std::vector<std::string>> components(std::string_view name) {
  if (name.empty()) return refuse(name, "empty name");
  if (name.front() == '/') return refuse(name, "absolute name");
  std::vector<std::string> out;
  for (std::string_view c : path_components(name)) {
    if (c == "..") return refuse(name, "'..' in the name");
    out.emplace_back(c);
  }
  return out;
}

// The directory that holds the last component, missing ones created (0755).
Result<UniqueFd> parent_of(int base, const std::vector<std::string>& comps, std::string_view name) {
  UniqueFd dir(::fcntl(base, F_DUPFD_CLOEXEC, 0));
  if (!dir) return sys_fail("dup");
  for (size_t i = 0; i + 1 < comps.size(); ++i) {
    int next = open_beneath(dir.get(), comps[i], O_PATH | O_DIRECTORY);
    if (next < 0 && errno == ENOENT) {
      if (::mkdirat(dir.get(), comps[i].c_str(), 0755) != 0 && errno != EEXIST)
        return sys_fail("tar entry '" + std::string(name) + "': mkdir " + comps[i]);
      next = open_beneath(dir.get(), comps[i], O_PATH | O_DIRECTORY);
    }
    if (next < 0) {
      if (errno == ELOOP || errno == EXDEV) return refuse(name, "goes through a symlink");
      return sys_fail("tar entry '" + std::string(name) + "': open " + comps[i]);
    }
    dir.reset(next);
  }
  return dir;
}

Result<void> extract_file(archive* tar, int dir, const std::string& leaf, mode_t perm,
                          std::string_view name) {
  // Unlinked first: an existing symlink is replaced, never written through.
  if (::unlinkat(dir, leaf.c_str(), 0) != 0 && errno != ENOENT && errno != EISDIR)
    return sys_fail("tar entry '" + std::string(name) + "': replace");
  UniqueFd fd(open_beneath(dir, leaf, O_WRONLY | O_CREAT | O_EXCL, perm));
  if (!fd) return sys_fail("tar entry '" + std::string(name) + "': create");
  char buf[65536];
  for (;;) {
    la_ssize_t n = archive_read_data(tar, buf, sizeof buf);
    if (n < 0)
      return fail(ErrorCode::invalid_argument,
                  "tar entry '" + std::string(name) + "': " + archive_message(tar));
    if (n == 0) break;
    for (la_ssize_t done = 0; done < n;) {
      ssize_t w = ::write(fd.get(), buf + done, static_cast<size_t>(n - done));
      if (w < 0) {
        if (errno == EINTR) continue;
        return sys_fail("write " + std::string(name));
      }
      done += w;
    }
  }
  ::fchmod(fd.get(), perm);  // as in the archive, not narrowed by our umask
  return {};
}

Result<void> extract(archive* tar, archive_entry* entry, int base) {
  std::string name = archive_entry_pathname(entry) ? archive_entry_pathname(entry) : "";
  auto comps = components(name);
  if (!comps) return std::unexpected(comps.error());
  const mode_t type = archive_entry_filetype(entry);
  if (archive_entry_hardlink(entry)) return refuse(name, "hard links are not extracted");
  if (type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
    return refuse(name, "special files are not extracted");
  if (comps->empty()) {
    if (type == AE_IFDIR) return {};  // "./": the destination itself
    return refuse(name, "names the destination directory");
  }
  auto parent = parent_of(base, *comps, name);
  if (!parent) return std::unexpected(parent.error());
  const int dir = parent->get();
  const std::string& leaf = comps->back();
  const mode_t perm = archive_entry_perm(entry) & 0777;  // no setuid, setgid, sticky
  if (type == AE_IFDIR) {
    if (::mkdirat(dir, leaf.c_str(), perm ? perm : 0755) == 0) return {};
    struct stat st {};
    if (errno == EEXIST && ::fstatat(dir, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISDIR(st.st_mode))
      return {};
    return errno == EEXIST ? refuse(name, "exists and is not a directory")
                           : sys_fail("tar entry '" + name + "': mkdir");
  }
  if (type == AE_IFLNK) {
    const char* target = archive_entry_symlink(entry);
    if (!target || !*target) return refuse(name, "symlink without a target");
    if (::unlinkat(dir, leaf.c_str(), 0) != 0 && errno != ENOENT)
      return sys_fail("tar entry '" + name + "': replace");
    if (::symlinkat(target, dir, leaf.c_str()) != 0)
      return sys_fail("tar entry '" + name + "': symlink");
    return {};
  }
  if (auto r = extract_file(tar, dir, leaf, perm, name); !r) return r;
  if (archive_entry_mtime_is_set(entry)) {
    const timespec times[2] = {{archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)},
                               {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}};
    (void)::utimensat(dir, leaf.c_str(), times, AT_SYMLINK_NOFOLLOW);
  }
  return {};
}

}  // namespace

Result<std::string> pack_directory(const std::string& dir) {
  std::string out;
  session::ArchiveWriter tar(archive_write_new());
  session::ArchiveEntry entry(archive_entry_new());
  if (!tar || !entry) return fail(ErrorCode::internal, "libarchive: out of memory");
  // pax_restricted: plain ustar headers, pax extensions only where ustar cannot say it
  // (long names, big sizes) — what the daemon writes too.
  if (archive_write_set_format_pax_restricted(tar.get()) != ARCHIVE_OK)
    return fail(ErrorCode::internal, "tar format: " + archive_message(tar.get()));
  (void)archive_write_set_options(tar.get(), "hdrcharset=BINARY");
  if (archive_write_open(tar.get(), &out, nullptr, &append_to_string, nullptr) != ARCHIVE_OK)
    return fail(ErrorCode::system, "tar open: " + archive_message(tar.get()));

  // Names relative to the directory itself: "d/", "d/." and "d" all mean d.
  std::string root = dir;
  while (root.size() > 1 && (root.ends_with('/') || root.ends_with("/.")))
    root.resize(root.size() - (root.ends_with('/') ? 1 : 2));
  std::error_code ec;
  fs::recursive_directory_iterator it(root, fs::directory_options::none, ec), end;
  if (ec) return fail(ErrorCode::system, "read directory " + root + ": " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return fail(ErrorCode::system, "read directory " + root + ": " + ec.message());
    const fs::path& path = it->path();
    std::string rel = path.lexically_relative(root).string();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;  // removed meanwhile
      return sys_fail("stat " + path.string());
    }
    Result<void> r;
    if (S_ISREG(st.st_mode)) {
      r = add_file(tar.get(), entry.get(), path, rel);
    } else if (S_ISDIR(st.st_mode)) {
      begin_entry(entry.get(), rel, st, AE_IFDIR);
      r = write_header(tar.get(), entry.get(), rel);
    } else if (S_ISLNK(st.st_mode)) {
      std::string target = fs::read_symlink(path, ec).string();
      if (ec) return fail(ErrorCode::system, "readlink " + path.string() + ": " + ec.message());
      begin_entry(entry.get(), rel, st, AE_IFLNK);
      archive_entry_copy_symlink(entry.get(), target.c_str());
      r = write_header(tar.get(), entry.get(), rel);
    }  // devices, fifos, sockets: skipped
    if (!r) return std::unexpected(r.error());
  }
  if (archive_write_close(tar.get()) != ARCHIVE_OK)
    return fail(ErrorCode::system, "tar close: " + archive_message(tar.get()));
  return out;
}

Result<uint64_t> unpack_into(const std::string& dir, std::string_view data) {
  UniqueFd base(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!base) return sys_fail("open " + dir);
  Source source{data};
  session::ArchiveReader tar(archive_read_new());
  if (!tar) return fail(ErrorCode::internal, "libarchive: out of memory");
  archive_read_support_format_tar(tar.get());
  archive_read_support_format_empty(tar.get());
  if (archive_read_open(tar.get(), &source, nullptr, &Source::read, nullptr) != ARCHIVE_OK)
    return fail(ErrorCode::invalid_argument, "tar from the server: " + archive_message(tar.get()));
  uint64_t count = 0;
  for (;;) {
    archive_entry* entry = nullptr;
    int rc = archive_read_next_header(tar.get(), &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc < ARCHIVE_WARN)
      return fail(ErrorCode::invalid_argument,
                  "tar from the server: " + archive_message(tar.get()));
    if (auto r = extract(tar.get(), entry, base.get()); !r) return std::unexpected(r.error());
    ++count;
  }
  return count;
}

}  // namespace cela::cli
