// One tar entry header as cela writes it, for the session's archive export and the
// CLI's local packing alike: path, type, permission bits, mtime, size; owner 0:0
// (ids of one side mean nothing on the other: the extracting side decides).
#pragma once

#include <sys/stat.h>

#include <string>

struct archive_entry;

namespace cela::session {

// `type` is AE_IFREG, AE_IFDIR or AE_IFLNK; the size is st_size for regular files.
void fill_tar_entry(archive_entry* entry, const std::string& rel, const struct stat& st, unsigned type);

}  // namespace cela::session
