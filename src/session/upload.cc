#include "session/upload.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

namespace cela::session {

Result<void> check_room(uint64_t bytes, const UploadRoom& room) {
  auto refuse = [&](std::string_view what, uint64_t free) {
    return fail(ErrorCode::limit, "an upload of " + std::to_string(bytes) + " bytes does not fit: the session has " +
                                      std::to_string(free) + " bytes of " + std::string(what) + " free");
  };
  if (bytes > room.disk_free) return refuse("disk", room.disk_free);
  if (room.memory_free && bytes > *room.memory_free) return refuse("memory", *room.memory_free);
  return {};
}

Upload::Upload(FileUpload file, runtime::FileWriter writer)
    : file_(std::move(file)), writer_(std::move(writer)) {}

Upload::~Upload() {
  if (reaped_ || !writer_.pidfd) return;
  writer_.input.reset();
  ::syscall(SYS_pidfd_send_signal, writer_.pidfd.get(), SIGKILL, nullptr, 0);
  (void)runtime::reap_file_writer(writer_.pidfd.get());
  // file_'s destructor removes the temp file.
}

Result<WriteResult> Upload::finish() {
  writer_.input.reset();
  reaped_ = true;
  if (auto r = runtime::reap_file_writer(writer_.pidfd.get()); !r) {
    Error e = r.error();
    e.context = "write " + std::string(file_.path()) + ": " + e.context;
    return std::unexpected(e);  // file_ removes the temp file when the upload is dropped
  }
  return file_.commit();
}

}  // namespace cela::session
