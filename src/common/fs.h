// Small file helpers for kernel interfaces (cgroupfs, procfs): whole-file reads and
// writes with errors that name the path.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cela {

Result<std::string> read_file(const std::string& path);
// read_file for a kernel interface file (a seq_file: cgroupfs, /proc): a read shorter
// than the buffer returned the whole file, so no second read looks for its end.
Result<std::string> read_interface_file(const std::string& path);
// Writes `data` with a single write(2) (kernel interface files want one write).
Result<void> write_file(const std::string& path, std::string_view data);
// Reads a file holding one unsigned integer ("max" is reported as UINT64_MAX).
Result<uint64_t> read_u64(const std::string& path);
// The number read_u64 reads, from text already read (`path` names it in errors).
Result<uint64_t> parse_u64(std::string_view text, const std::string& path);
// Creates `path` with `mode` and missing parents with 0755; existing ones are kept as
// they are.
Result<void> make_dirs(const std::string& path, unsigned mode = 0755);
// The components of a path, in order, split at '/': "" and "." dropped, ".." kept
// (lexical only; the views point into `path`).
std::vector<std::string_view> path_components(std::string_view path);

}  // namespace cela
