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

class Upload {
 public:
  Upload(FileUpload file, runtime::FileWriter writer);
  Upload(Upload&&) = delete;
  // Unfinished: kills the writer, reaps it, removes the temp file.
  ~Upload();

  // The writer's stdin (call once): the caller writes the body here and closes it.
  UniqueFd take_input() { return std::move(writer_.input); }
  // Readable once the writer has exited.
  int writer_pidfd() const { return writer_.pidfd.get(); }
  // Before `chunk` goes to the input: limit past the session's max upload size.
  Result<void> passed(std::string_view chunk) { return file_.append(chunk); }
  // After the writer exited: reaps it, then renames the file into place or removes it.
  Result<WriteResult> finish();

 private:
  FileUpload file_;
  runtime::FileWriter writer_;
  bool reaped_ = false;
};

}  // namespace cela::session
