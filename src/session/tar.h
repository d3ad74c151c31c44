// libarchive as cela uses it, for the session's archive export/import and the CLI's
// local packing alike: owning handles, the error text of a handle, and one tar entry
// header: path, type, permission bits, mtime, size; owner 0:0 (ids of one side mean
// nothing on the other: the extracting side decides).
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>

#include <memory>
#include <string>

namespace cela::session {

struct ArchiveWriteFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct ArchiveReadFree {
  void operator()(archive* a) const { archive_read_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};
using ArchiveWriter = std::unique_ptr<archive, ArchiveWriteFree>;
using ArchiveReader = std::unique_ptr<archive, ArchiveReadFree>;
using ArchiveEntry = std::unique_ptr<archive_entry, EntryFree>;

inline std::string archive_message(archive* a) {
  const char* text = archive_error_string(a);
  return text ? text : "unknown libarchive error";
}

// `type` is AE_IFREG, AE_IFDIR or AE_IFLNK; the size is st_size for regular files.
void fill_tar_entry(archive_entry* entry, const std::string& rel, const struct stat& st, unsigned type);

}  // namespace cela::session
