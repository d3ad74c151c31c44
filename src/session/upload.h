// Upload: one file streamed into a live session (PUT /v1/sessions/{id}/files).
//
// The body never sits whole in the daemon, and its bytes are charged to the session:
// SessionFs resolves the path and creates the temp file exactly as for any write (the
// same openat2 rules, owner and mode), then hands the temp file's fd to a writer process
// born in the session's cgroups (runtime::FileWriter). The caller streams the body into
// the writer's stdin, chunk by chunk, calling passed() for each chunk first (size cap,
// sha256), closes the input at the end, waits until the writer's pidfd is readable, and
// calls finish(): the temp file is renamed over the target only when every byte landed.
// A writer that failed (the session's disk full: ENOSPC; its memory full: the memory
// cgroup's OOM killer takes the writer) leaves no file: the temp file is removed.
//
// Threads: open (SessionManager::open_upload) waits for the reactor only; passed() and
// finish() are the caller's (finish() after the writer has exited, so it never waits on
// sandbox code). Not thread-safe: one caller at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.h"
#include "common/fd.h"
#include "runtime/runtime.h"
#include "session/session_fs.h"

namespace cela::session {

// How much more the session can hold: its writable layer's free bytes and, when the
// layer is memory (tmpfs) and the session has a memory limit, the headroom under it.
struct UploadRoom {
  uint64_t disk_free = 0;
  std::optional<uint64_t> memory_free;
};

// limit when `bytes` cannot fit in `room` (the message says which budget refuses);
// pure, for the early refusal of a declared Content-Length.
Result<void> check_room(uint64_t bytes, const UploadRoom& room);

// Free memory under the memory limit of the cgroup a process is in, from its
// /proc/PID/cgroup text and the cgroup mount (v1: the memory hierarchy; v2: the unified
// one); nullopt when there is no limit. The archive import helper asks it of itself.
std::optional<uint64_t> memory_headroom(std::string_view proc_cgroup, const std::string& cgroup_root);

class Upload {
 public:
  Upload(FileUpload file, runtime::FileWriter writer);
  Upload(Upload&&) = delete;
  // Unfinished: kills the writer, reaps it, removes the temp file.
  ~Upload();

  // The writer's stdin (call once): the caller writes the body here and closes it.
  UniqueFd take_input() { return std::move(writer_.input); }
  // Readable once the writer is done.
  int done_fd() const { return writer_.status.get(); }
  // Before `chunk` goes to the input: limit past the session's max upload size.
  Result<void> passed(std::string_view chunk) { return file_.append(chunk); }
  // Once done_fd() is readable: renames the file into place, or removes it. The writer
  // is reaped when the upload is dropped (after the answer: its exit takes a while).
  Result<WriteResult> finish();

 private:
  FileUpload file_;
  runtime::FileWriter writer_;
  bool reaped_ = false;
};

// ArchiveImport: a tar streamed into a live session (PUT /v1/sessions/{id}/archive).
// The extraction runs in a helper (runtime::Helper: `cela __import-tar`, the sandbox's
// root in its user namespace and cgroups, so every page and inode it creates is the
// session's) that reads the tar on its stdin and runs SessionFs::import_tar on the
// session root the daemon opened (its fd 3): the same path rules, entry checks and
// limits as before. Its one-line JSON answer on stdout is read once it has exited.
class ArchiveImport {
 public:
  explicit ArchiveImport(runtime::Helper helper) : helper_(std::move(helper)) {}
  ArchiveImport(ArchiveImport&&) = delete;
  // Unfinished: kills and reaps the helper.
  ~ArchiveImport();

  UniqueFd take_input() { return std::move(helper_.input); }
  int done_fd() const { return helper_.pidfd.get(); }
  Result<void> passed(std::string_view) { return {}; }  // the helper counts
  // After the helper exited: the number of entries extracted, or why not.
  Result<uint64_t> finish();

 private:
  runtime::Helper helper_;
  bool reaped_ = false;
};

// The helper's side (`cela __import-tar DIR UID GID MAX_BYTES MAX_ENTRIES MAX_DEPTH`,
// ids as the sandbox sees them, the root on fd 3): extracts stdin, answers on stdout.
[[noreturn]] void tar_import_main(int argc, char** argv);
inline constexpr const char* kTarImportCommand = "__import-tar";

}  // namespace cela::session
