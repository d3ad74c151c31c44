// SessionFs tar export and import (libarchive streams, no archive_write_disk): the
// export walks the tree with one fd per directory and never follows a symlink; the
// import validates every entry's name and link target and creates each entry beneath
// the extraction directory without following any symlink.
#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "common/fs.h"
#include "session/fs_internal.h"
#include "session/session_fs.h"
#include "session/tar.h"

namespace cela::session {

using namespace fs_detail;

namespace {

// ---- export ----

// The tar stream's destination: counts bytes against the cap before handing a block to
// the sink, and keeps the first error (a cap or the sink's own) for the caller.
struct ExportSink {
  const std::function<Result<void>(std::string_view)>* sink;
  uint64_t max_bytes;
  uint64_t written = 0;
  std::optional<Error> error;

  static la_ssize_t write(archive* a, void* client, const void* buffer, size_t length) {
    auto* self = static_cast<ExportSink*>(client);
    if (self->error) return -1;
    if (length > self->max_bytes - self->written) {
      self->error = Error{ErrorCode::limit, 0,
                          "archive larger than " + std::to_string(self->max_bytes) + " bytes"};
      archive_set_error(a, EFBIG, "archive size limit");
      return -1;
    }
    if (auto r = (*self->sink)(std::string_view(static_cast<const char*>(buffer), length)); !r) {
      self->error = r.error();
      archive_set_error(a, EIO, "sink failed");
      return -1;
    }
    self->written += length;
    return static_cast<la_ssize_t>(length);
  }
};

struct Exporter {
  archive* tar;
  ExportSink& sink;
  const FsLimits& limits;
  archive_entry* entry;
  uint64_t entries = 0;
  const SessionFs::ExportFilter* filter = nullptr;

  std::unexpected<Error> tar_fail(std::string_view what) {
    if (sink.error) return std::unexpected(*sink.error);
    return fail(ErrorCode::system, std::string(what) + ": " + archive_message(tar));
  }

  Result<void> begin_entry(const std::string& rel, const struct stat& st, unsigned type) {
    if (++entries > limits.max_archive_entries)
      return fail(ErrorCode::limit, "archive with more than " +
                                        std::to_string(limits.max_archive_entries) + " entries");
    fill_tar_entry(entry, rel, st, type);
    return {};
  }

  Result<void> write_header(const std::string& rel) {
    if (archive_write_header(tar, entry) < ARCHIVE_WARN) return tar_fail("tar header " + rel);
    return {};
  }

  Result<void> add_file(int dir_fd, const std::string& name, const std::string& rel) {
    std::string what = "export " + rel;
    // O_PATH then fstat then reopen: only a regular file is ever opened for reading.
    auto path_fd = open_at(dir_fd, name, O_PATH, kBeneath, what);
    if (!path_fd) return {};  // replaced by a symlink or removed meanwhile: skip
    auto st = stat_fd(path_fd->get(), what);
    if (!st) return std::unexpected(st.error());
    if (!S_ISREG(st->st_mode)) return {};
    auto fd = reopen(path_fd->get(), O_RDONLY, what);
    if (!fd) return std::unexpected(fd.error());
    if (filter && *filter) return add_filtered(*fd, rel, *st);
    if (auto r = begin_entry(rel, *st, AE_IFREG); !r) return r;
    if (auto r = write_header(rel); !r) return r;
    // Exactly st_size bytes: a file that shrank meanwhile is padded with zeros by
    // libarchive, one that grew is cut at the size in the header.
    uint64_t remaining = static_cast<uint64_t>(st->st_size);
    char buf[65536];
    while (remaining > 0) {
      ssize_t n = ::read(fd->get(), buf, std::min<uint64_t>(sizeof buf, remaining));
      if (n < 0) {
        if (errno == EINTR) continue;
        return fs_fail(what);
      }
      if (n == 0) break;
      if (archive_write_data(tar, buf, static_cast<size_t>(n)) < 0) return tar_fail(what);
      remaining -= static_cast<uint64_t>(n);
    }
    if (archive_write_finish_entry(tar) < ARCHIVE_WARN) return tar_fail(what);
    return {};
  }

  // The whole file through the export filter (a secret scan), then the entry with the
  // size of what the filter returned.
  Result<void> add_filtered(const UniqueFd& fd, const std::string& rel, const struct stat& st) {
    std::string what = "export " + rel;
    if (static_cast<uint64_t>(st.st_size) > limits.max_file_bytes)
      return fail(ErrorCode::limit, "file too large to scan for secrets before export: " + rel);
    std::string data;
    char buf[65536];
    for (;;) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n < 0) {
        if (errno == EINTR) continue;
        return fs_fail(what);
      }
      if (n == 0) break;
      if (data.size() + static_cast<size_t>(n) > limits.max_file_bytes)
        return fail(ErrorCode::limit, "file too large to scan for secrets before export: " + rel);
      data.append(buf, static_cast<size_t>(n));
    }
    auto shown = (*filter)(rel, std::move(data));
    if (!shown) return std::unexpected(shown.error());
    if (auto r = begin_entry(rel, st, AE_IFREG); !r) return r;
    archive_entry_set_size(entry, static_cast<la_int64_t>(shown->size()));
    if (auto r = write_header(rel); !r) return r;
    if (!shown->empty() && archive_write_data(tar, shown->data(), shown->size()) < 0) return tar_fail(what);
    if (archive_write_finish_entry(tar) < ARCHIVE_WARN) return tar_fail(what);
    return {};
  }

  Result<void> add_symlink(int dir_fd, const std::string& name, const std::string& rel,
                           const struct stat& st) {
    auto target = read_link_at(dir_fd, name, "export " + rel);
    if (!target) return {};  // no longer a symlink: skip
    if (auto r = begin_entry(rel, st, AE_IFLNK); !r) return r;
    archive_entry_copy_symlink(entry, target->c_str());
    return write_header(rel);
  }

  Result<void> walk(int dir_fd, const std::string& rel_prefix, int depth) {
    if (depth > limits.max_depth) return fail(ErrorCode::limit, "tree too deep: " + rel_prefix);
    std::string what = "export " + (rel_prefix.empty() ? std::string(".") : rel_prefix);
    auto stream = DirStream::open(dir_fd, what);
    if (!stream) return std::unexpected(stream.error());
    std::vector<std::string> names;
    uint64_t room = limits.max_archive_entries - std::min(entries, limits.max_archive_entries);
    auto more =
        stream->read(names, static_cast<size_t>(std::min<uint64_t>(room, SIZE_MAX - 1) + 1), what);
    if (!more) return std::unexpected(more.error());
    if (names.size() > room)
      return fail(ErrorCode::limit, "archive with more than " +
                                        std::to_string(limits.max_archive_entries) + " entries");
    std::ranges::sort(names);
    for (const auto& name : names) {
      std::string rel = rel_prefix + name;
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) continue;
        return fs_fail("export " + rel);
      }
      Result<void> r;
      switch (st.st_mode & S_IFMT) {
        case S_IFREG:
          r = add_file(dir_fd, name, rel);
          break;
        case S_IFLNK:
          r = add_symlink(dir_fd, name, rel, st);
          break;
        case S_IFDIR: {
          auto child = open_at(dir_fd, name, O_RDONLY | O_DIRECTORY, kBeneath, "export " + rel);
          // A mount point (EXDEV) is skipped whole; so is a directory swapped meanwhile.
          if (!child) break;
          auto child_st = stat_fd(child->get(), "export " + rel);
          if (!child_st) return std::unexpected(child_st.error());
          if (r = begin_entry(rel, *child_st, AE_IFDIR); !r) return r;
          if (r = write_header(rel); !r) return r;
          r = walk(child->get(), rel + "/", depth + 1);
          break;
        }
        default:
          break;  // devices, fifos, sockets: never exported
      }
      if (!r) return r;
    }
    return {};
  }
};

// ---- import ----

struct ImportSource {
  const std::function<Result<std::string_view>()>* source;
  std::optional<Error> error;

  static la_ssize_t read(archive* a, void* client, const void** buffer) {
    auto* self = static_cast<ImportSource*>(client);
    auto chunk = (*self->source)();
    if (!chunk) {
      self->error = chunk.error();
      archive_set_error(a, EIO, "source failed");
      return -1;
    }
    *buffer = chunk->data();
    return static_cast<la_ssize_t>(chunk->size());
  }
};

std::unexpected<Error> refuse(std::string_view entry, std::string_view why) {
  return fail(ErrorCode::invalid_argument,
              "tar entry '" + std::string(entry) + "': " + std::string(why));
}

// The components of a relative name, "" and "." dropped; absolute names and ".." are
// refused.
Result<std::vector<std::string>> name_components(std::string_view name, std::string_view entry,
                                                 std::string_view role) {
  if (name.empty()) return refuse(entry, std::string(role) + " is empty");
  if (name.size() > kMaxPathBytes)
    return refuse(entry, std::string(role) + " longer than 4096 bytes");
  if (name.front() == '/') return refuse(entry, std::string(role) + " is an absolute path");
  std::vector<std::string> comps;
  for (std::string_view comp : path_components(name)) {
    if (comp == "..") return refuse(entry, std::string(role) + " has a '..' component");
    comps.emplace_back(comp);
  }
  return comps;
}

// Whether a symlink `depth` directories below the extraction directory, pointing at the
// relative `target`, leaves the directory lexically. The real guarantee is elsewhere:
// the import never follows a symlink, and every later API call resolves in the root.
bool leaves_dir(size_t depth, std::string_view target) {
  long level = static_cast<long>(depth);
  for (std::string_view comp : path_components(target)) {
    if (comp != "..") ++level;
    else if (--level < 0) return true;
  }
  return false;
}

}  // namespace

Result<void> SessionFs::export_tar(std::string_view dir,
                                   const std::function<Result<void>(std::string_view)>& sink) {
  if (auto r = check_path(dir); !r) return r;
  auto top = open_in_root(dir, O_RDONLY | O_DIRECTORY);
  if (!top) return std::unexpected(top.error());
  if (auto r = check_exportable(top->get(), dir); !r) return r;
  if (!sink) return {};  // only the policy check was asked for

  // Declared before the archive: archive_write_free may still flush through it.
  ExportSink out{&sink, limits_.max_archive_bytes, 0, std::nullopt};
  ArchiveWriter tar(archive_write_new());
  ArchiveEntry entry(archive_entry_new());
  if (!tar || !entry) return fail(ErrorCode::internal, "libarchive: out of memory");
  // pax_restricted: plain ustar headers, pax extensions only for long names, big sizes
  // and non-ASCII names (kept as raw bytes).
  if (archive_write_set_format_pax_restricted(tar.get()) != ARCHIVE_OK)
    return fail(ErrorCode::internal, "tar format: " + archive_message(tar.get()));
  (void)archive_write_set_options(tar.get(), "hdrcharset=BINARY");
  if (archive_write_open(tar.get(), &out, nullptr, &ExportSink::write, nullptr) != ARCHIVE_OK)
    return fail(ErrorCode::system, "tar open: " + archive_message(tar.get()));

  Exporter exporter{tar.get(), out, limits_, entry.get(), 0, &export_filter_};
  if (auto r = exporter.walk(top->get(), "", 1); !r) return r;
  if (archive_write_close(tar.get()) != ARCHIVE_OK) return exporter.tar_fail("tar close");
  return {};
}

// One import: the extraction directory, the archive being read, and a step per entry
// kind. Nested in SessionFs for make_dir_at, start_upload and the owner.
struct SessionFs::TarImport {
  const SessionFs& fs;
  archive* tar;
  int base;  // the extraction directory (O_PATH)
  const std::optional<Error>& source_error;

  std::unexpected<Error> tar_fail(std::string_view what) const {
    if (source_error) return std::unexpected(*source_error);
    return fail(ErrorCode::invalid_argument, std::string(what) + ": " + archive_message(tar));
  }

  // Extracts one entry; false when it was skipped ("./").
  Result<bool> extract(archive_entry* entry, const std::string& name) const {
    auto comps = name_components(name, name, "name");
    if (!comps) return std::unexpected(comps.error());
    const char* hardlink = archive_entry_hardlink(entry);
    const mode_t type = archive_entry_filetype(entry);
    if (!hardlink && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK)
      return refuse(name, "devices, fifos and sockets are not extracted");
    if (comps->empty()) {
      if (hardlink || type != AE_IFDIR) return refuse(name, "names the extraction directory");
      return false;  // "./": the extraction directory itself is kept as it is
    }
    if (comps->size() > static_cast<size_t>(fs.limits_.max_depth))
      return fail(ErrorCode::limit,
                  "tar entry '" + name + "': deeper than " + std::to_string(fs.limits_.max_depth));

    // Link targets are checked before anything is created.
    std::vector<std::string> link_target;
    const char* symlink_target = nullptr;
    if (hardlink) {
      auto target = name_components(hardlink, name, "hard link target");
      if (!target) return std::unexpected(target.error());
      if (target->empty()) return refuse(name, "hard link to the extraction directory");
      link_target = std::move(*target);
    } else if (type == AE_IFLNK) {
      symlink_target = archive_entry_symlink(entry);
      if (symlink_target == nullptr) symlink_target = archive_entry_symlink_utf8(entry);
      if (symlink_target == nullptr || *symlink_target == '\0')
        return refuse(name, "symlink without a target");
      if (symlink_target[0] == '/') return refuse(name, "symlink to an absolute path");
      if (std::string_view(symlink_target).size() > kMaxPathBytes)
        return refuse(name, "symlink target longer than 4096 bytes");
      if (leaves_dir(comps->size() - 1, symlink_target))
        return refuse(name, "symlink pointing out of the extraction directory");
    }

    auto parent = parent_dir(*comps, name, /*create=*/true);
    if (!parent) return std::unexpected(parent.error());
    const int dir_fd = parent->get();
    const std::string& leaf = comps->back();
    const uint32_t perm = archive_entry_perm(entry) & 0777;  // no setuid, setgid, sticky
    Result<void> done;
    if (hardlink)
      done = hard_link(dir_fd, leaf, link_target, name);
    else if (type == AE_IFDIR)
      done = directory(dir_fd, leaf, perm ? perm : 0755, name);
    else if (type == AE_IFLNK)
      done = symlink(dir_fd, leaf, symlink_target, name);
    else if (fs.room_check_ && !(done = fs.room_check_(static_cast<uint64_t>(archive_entry_size(entry)))))
      done = std::unexpected(with_prefix(done.error(), "tar entry '" + name + "': "));
    else
      done = file(dir_fd, leaf, perm, name);
    if (!done) return std::unexpected(done.error());

    if (!hardlink && type != AE_IFDIR && archive_entry_mtime_is_set(entry)) {
      // By name after the rename, never following: at worst this dates something the
      // sandbox swapped in meanwhile. Directory times are left alone (later entries
      // would change them anyway).
      const timespec times[2] = {{archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)},
                                 {archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)}};
      (void)::utimensat(dir_fd, leaf.c_str(), times, AT_SYMLINK_NOFOLLOW);
    }
    return true;
  }

  // The directory holding the last of `comps`, each step opened beneath the previous
  // one with no symlink followed: a symlink from an earlier entry or planted by the
  // sandbox is never walked through. create: missing directories are made (0755).
  Result<UniqueFd> parent_dir(const std::vector<std::string>& comps, const std::string& name,
                              bool create) const {
    auto dir = dup_fd(base, "tar entry '" + name + "'");
    if (!dir) return dir;
    std::string prefix;
    for (size_t i = 0; i + 1 < comps.size(); ++i) {
      const std::string& comp = comps[i];
      prefix += (prefix.empty() ? "" : "/") + comp;
      const std::string what = "tar entry '" + name + "': open " + prefix;
      auto next = open_at(dir->get(), comp, O_PATH | O_DIRECTORY, kBeneath, what);
      if (!next && next.error().err == ENOENT && create) {
        auto made = fs.make_dir_at(dir->get(), comp, 0755, "tar entry '" + name + "': " + prefix);
        if (!made && made.error().err != EEXIST) return std::unexpected(made.error());
        next = open_at(dir->get(), comp, O_PATH | O_DIRECTORY, kBeneath, what);
      }
      if (!next) {
        if (next.error().err == ELOOP)
          return refuse(name, "goes through the symlink '" + prefix + "'");
        if (next.error().err == ENOTDIR) return refuse(name, "'" + prefix + "' is not a directory");
        return next;
      }
      *dir = std::move(*next);
    }
    return dir;
  }

  // A hard link to a regular file already under the extraction directory; the inode is
  // left as it is (no owner or mode change).
  Result<void> hard_link(int dir_fd, const std::string& leaf,
                         const std::vector<std::string>& target, const std::string& name) const {
    auto target_dir = parent_dir(target, name, /*create=*/false);
    if (!target_dir) return refuse(name, "hard link target is not reachable without symlinks");
    struct stat st {};
    if (::fstatat(target_dir->get(), target.back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode))
      return refuse(name, "hard link target is not a file in the extraction directory");
    const std::string what = "tar entry '" + name + "': link";
    std::string temp = temp_name();
    if (::linkat(target_dir->get(), target.back().c_str(), dir_fd, temp.c_str(), 0) != 0)
      return fs_fail(what);
    if (::renameat(dir_fd, temp.c_str(), dir_fd, leaf.c_str()) != 0) {
      int err = errno;
      ::unlinkat(dir_fd, temp.c_str(), 0);
      return fs_fail(what, err);
    }
    // rename(2) between two links of one inode does nothing: drop the temp name.
    ::unlinkat(dir_fd, temp.c_str(), 0);
    return {};
  }

  // A new directory gets `mode` and the owner; an existing one is kept as it is.
  Result<void> directory(int dir_fd, const std::string& leaf, uint32_t mode,
                         const std::string& name) const {
    auto made = fs.make_dir_at(dir_fd, leaf, mode, "tar entry '" + name + "'");
    if (made || made.error().err != EEXIST) return made;
    struct stat st {};
    if (::fstatat(dir_fd, leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode))
      return refuse(name, "exists and is not a directory");
    return {};
  }

  // Made under a temp name, owned, then renamed over `leaf` (replacing a file or link).
  Result<void> symlink(int dir_fd, const std::string& leaf, const char* target,
                       const std::string& name) const {
    const std::string what = "tar entry '" + name + "': symlink";
    std::string temp;
    for (int attempt = 0;; ++attempt) {
      temp = temp_name();
      if (::symlinkat(target, dir_fd, temp.c_str()) == 0) break;
      if (errno != EEXIST || attempt == 16) return fs_fail(what);
    }
    if (::fchownat(dir_fd, temp.c_str(), fs.owner_uid_, fs.owner_gid_, AT_SYMLINK_NOFOLLOW) != 0 ||
        ::renameat(dir_fd, temp.c_str(), dir_fd, leaf.c_str()) != 0) {
      int err = errno;
      ::unlinkat(dir_fd, temp.c_str(), 0);
      return fs_fail(what, err);
    }
    return {};
  }

  // The entry's data through an upload (temp file, owner, mode, rename).
  Result<void> file(int dir_fd, const std::string& leaf, uint32_t mode,
                    const std::string& name) const {
    const std::string label = "tar entry '" + name + "': ";
    auto dir = dup_fd(dir_fd, label + "dup");
    if (!dir) return std::unexpected(dir.error());
    // Entry data is capped for the whole archive (max_archive_bytes), not per file.
    auto upload = fs.start_upload(std::move(*dir), leaf, name, mode, UINT64_MAX);
    if (!upload) return std::unexpected(with_prefix(upload.error(), label));
    char buf[65536];
    for (;;) {
      la_ssize_t n = archive_read_data(tar, buf, sizeof buf);
      if (n < 0) return tar_fail(label + "data");
      if (n == 0) break;
      if (auto r = upload->append(std::string_view(buf, static_cast<size_t>(n))); !r)
        return std::unexpected(with_prefix(r.error(), label));
    }
    auto written = upload->commit();
    if (!written) return std::unexpected(with_prefix(written.error(), label));
    return {};
  }
};

Result<uint64_t> SessionFs::import_tar(std::string_view dir,
                                       const std::function<Result<std::string_view>()>& source) {
  if (auto r = check_path(dir); !r) return std::unexpected(r.error());
  auto base = open_in_root(dir, O_PATH | O_DIRECTORY);
  if (!base) return std::unexpected(base.error());
  if (auto r = check_writable(base->get(), dir); !r) return std::unexpected(r.error());

  // Declared before the archive, which calls back into it until freed.
  ImportSource input{&source, std::nullopt};
  ArchiveReader tar(archive_read_new());
  if (!tar) return fail(ErrorCode::internal, "libarchive: out of memory");
  archive_read_support_format_tar(tar.get());
  archive_read_support_format_empty(tar.get());
  // Only decoders compiled into libarchive: the others would run an external program
  // on client bytes.
  if (archive_zlib_version()) archive_read_support_filter_gzip(tar.get());
  if (archive_bzlib_version()) archive_read_support_filter_bzip2(tar.get());
  if (archive_liblzma_version()) archive_read_support_filter_xz(tar.get());
  if (archive_libzstd_version()) archive_read_support_filter_zstd(tar.get());
  TarImport import{*this, tar.get(), base->get(), input.error};
  if (archive_read_open(tar.get(), &input, nullptr, &ImportSource::read, nullptr) != ARCHIVE_OK)
    return import.tar_fail("tar");

  uint64_t seen = 0, extracted = 0, data_bytes = 0;
  for (;;) {
    archive_entry* entry = nullptr;
    int status = archive_read_next_header(tar.get(), &entry);
    if (status == ARCHIVE_EOF) break;
    if (status < ARCHIVE_WARN) return import.tar_fail("tar");
    if (++seen > limits_.max_archive_entries)
      return fail(ErrorCode::limit, "archive with more than " +
                                        std::to_string(limits_.max_archive_entries) + " entries");
    // Counted before anything is read: libarchive would otherwise skip (decompress)
    // the data of an entry without bound.
    if (archive_entry_size_is_set(entry)) {
      la_int64_t size = archive_entry_size(entry);
      if (size < 0 || static_cast<uint64_t>(size) > limits_.max_archive_bytes - data_bytes)
        return fail(ErrorCode::limit, "archive data larger than " +
                                          std::to_string(limits_.max_archive_bytes) + " bytes");
      data_bytes += static_cast<uint64_t>(size);
    }
    const char* name = archive_entry_pathname(entry);
    if (name == nullptr) name = archive_entry_pathname_utf8(entry);
    if (name == nullptr)
      return fail(ErrorCode::invalid_argument,
                  "tar entry #" + std::to_string(seen) + " has no name");
    auto done = import.extract(entry, name);
    if (!done) return std::unexpected(done.error());
    if (*done) ++extracted;
  }
  return extracted;
}

void fill_tar_entry(archive_entry* entry, const std::string& rel, const struct stat& st, unsigned type) {
  archive_entry_clear(entry);
  archive_entry_copy_pathname(entry, rel.c_str());
  archive_entry_set_filetype(entry, type);
  archive_entry_set_perm(entry, st.st_mode & 07777);
  archive_entry_set_uid(entry, 0);
  archive_entry_set_gid(entry, 0);
  archive_entry_set_mtime(entry, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  archive_entry_set_size(entry, type == AE_IFREG ? st.st_size : 0);
}

}  // namespace cela::session
