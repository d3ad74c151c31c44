// Local directory trees as tar streams, for `cela cp` of directories: the daemon's
// archive endpoints (GET/PUT /v1/sessions/{id}/archive) speak tar, and this is the
// client's half. libarchive streams only (through session/libarchive_shim.cc, loaded on
// first use), never archive_write_disk: extraction is done here, entry by entry.
#pragma once

#include <string>
#include <string_view>

#include "common/error.h"

namespace cela::cli {

// A tar of the contents of `dir` (entry names relative to it, no "./" entry):
// directories, regular files and symlinks (kept as links, never followed); devices,
// fifos and sockets are skipped.
Result<std::string> pack_directory(const std::string& dir);

// Extracts `tar` into the existing directory `dir`. Entry names that are absolute or
// hold "..", hard links and special files are refused; no path is ever resolved
// through a symlink (one in the archive or already on disk), so an archive cannot
// write outside `dir`. Existing files are replaced, existing directories merged.
// Returns the number of entries extracted.
Result<uint64_t> unpack_into(const std::string& dir, std::string_view tar);

}  // namespace cela::cli
