#include "session/upload.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <charconv>
#include <filesystem>
#include <limits>
#include <string>

#include "common/fs.h"
#include "common/json_fields.h"
#include "common/json_text.h"

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

namespace {

// An intake dropped before its end: its process is killed and reaped.
void end_process(UniqueFd& input, const UniqueFd& pidfd) {
  input.reset();
  ::syscall(SYS_pidfd_send_signal, pidfd.get(), SIGKILL, nullptr, 0);
  (void)runtime::reap_helper(pidfd.get());
}

}  // namespace

Upload::~Upload() {
  if (reaped_ || !writer_.pidfd) return;
  end_process(writer_.input, writer_.pidfd);  // a writer that said it is done is exiting anyway
  // file_'s destructor removes the temp file.
}

Result<WriteResult> Upload::finish() {
  writer_.input.reset();
  if (auto r = runtime::file_writer_result(writer_, reaped_); !r) {
    Error e = r.error();
    e.context = "write " + std::string(file_.path()) + ": " + e.context;
    return std::unexpected(e);  // file_ removes the temp file when the upload is dropped
  }
  return file_.commit();
}

namespace {

ErrorCode error_code_named(std::string_view name) {
  for (int c = 0; c <= static_cast<int>(ErrorCode::internal); ++c)
    if (to_string(static_cast<ErrorCode>(c)) == name) return static_cast<ErrorCode>(c);
  return ErrorCode::internal;
}

template <class T>
bool parse_number(const char* text, T& out) {
  std::string_view v(text);
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  return ec == std::errc() && p == v.data() + v.size();
}

void answer(const boost::json::object& o) {
  std::string line = json_text(o) + "\n";
  for (size_t done = 0; done < line.size();) {
    ssize_t n = ::write(1, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

ArchiveImport::~ArchiveImport() {
  if (!reaped_ && helper_.pidfd) end_process(helper_.input, helper_.pidfd);
}

Result<uint64_t> ArchiveImport::finish() {
  helper_.input.reset();
  reaped_ = true;
  auto status = runtime::reap_helper(helper_.pidfd.get());
  if (!status) return std::unexpected(status.error());
  if (WIFSIGNALED(*status))
    return fail(ErrorCode::limit,
                "the import was stopped: the session's memory limit was reached (or the session ended)");
  // It has exited: its whole answer is in the pipe.
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(helper_.output.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > 65536) break;
  }
  auto o = parse_json_object(out, "the archive import helper's answer");
  if (!o)
    return fail(ErrorCode::internal, "the archive import helper gave no answer (status " + std::to_string(*status) + ")");
  JsonFields answer(*o);
  auto malformed = [] { return fail(ErrorCode::internal, "malformed answer of the archive import helper"); };
  auto entries = answer.integer("entries");
  if (!entries) return malformed();
  if (*entries && **entries >= 0) return static_cast<uint64_t>(**entries);
  auto e = answer.object("error");
  if (!e || !*e) return malformed();
  auto code = (*e)->string("code");
  auto err_no = (*e)->integer("err");
  auto context = (*e)->string("context");
  if (!code || !err_no || !context) return malformed();
  Error err;
  if (*code) err.code = error_code_named(**code);
  if (*err_no) err.err = static_cast<int>(**err_no);
  if (*context) err.context = **context;
  return std::unexpected(err);
}

std::optional<uint64_t> memory_headroom(std::string_view proc_cgroup, const std::string& cgroup_root) {
  const bool v1 = std::filesystem::exists(cgroup_root + "/memory");
  for (size_t pos = 0; pos < proc_cgroup.size();) {
    size_t end = proc_cgroup.find('\n', pos);
    if (end == std::string_view::npos) end = proc_cgroup.size();
    std::string_view line = proc_cgroup.substr(pos, end - pos);
    pos = end + 1;
    std::string dir;
    const char *limit_file = nullptr, *usage_file = nullptr;
    if (auto i = line.find(":memory:"); v1 && i != std::string_view::npos) {
      dir = cgroup_root + "/memory" + std::string(line.substr(i + 8));
      limit_file = "/memory.limit_in_bytes", usage_file = "/memory.usage_in_bytes";
    } else if (!v1 && line.starts_with("0::")) {
      dir = cgroup_root + std::string(line.substr(3));
      limit_file = "/memory.max", usage_file = "/memory.current";
    } else {
      continue;
    }
    auto limit = read_u64(dir + limit_file);
    auto usage = read_u64(dir + usage_file);
    if (!limit || !usage || *limit == std::numeric_limits<uint64_t>::max()) return std::nullopt;  // unreadable, or "max"
    return *limit > *usage ? *limit - *usage : 0;
  }
  return std::nullopt;
}

void tar_import_main(int argc, char** argv) {
  auto refuse = [](const Error& e) {
    answer({{"error", {{"code", to_string(e.code)}, {"err", e.err}, {"context", e.context}}}});
    ::_exit(0);
  };
  // Not dumpable: nothing of the host's (or another process of the same ids) may read
  // or trace it. execve made it dumpable again.
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  uid_t uid = 0;
  gid_t gid = 0;
  FsLimits limits;
  if (argc != 8 || !parse_number(argv[3], uid) || !parse_number(argv[4], gid) ||
      !parse_number(argv[5], limits.max_archive_bytes) || !parse_number(argv[6], limits.max_archive_entries) ||
      !parse_number(argv[7], limits.max_depth))
    refuse(Error{ErrorCode::internal, 0, "usage: cela __import-tar DIR UID GID MAX_BYTES MAX_ENTRIES MAX_DEPTH"});
  SessionFs fs(UniqueFd(3), uid, gid, limits);
  fs.set_room_check([](uint64_t bytes) -> Result<void> {
    struct statfs st {};
    UploadRoom room;
    room.disk_free = ::fstatfs(3, &st) == 0 ? static_cast<uint64_t>(st.f_bavail) * st.f_bsize : UINT64_MAX;
    auto self = read_file("/proc/self/cgroup");
    room.memory_free = self ? memory_headroom(*self, "/sys/fs/cgroup") : std::nullopt;
    return check_room(bytes, room);
  });
  std::string chunk(65536, '\0');
  auto n = fs.import_tar(argv[2], [&]() -> Result<std::string_view> {
    for (;;) {
      ssize_t got = ::read(0, chunk.data(), chunk.size());
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return sys_fail("read the archive");
      return std::string_view(chunk.data(), static_cast<size_t>(got));
    }
  });
  if (!n) refuse(n.error());
  answer({{"entries", *n}});
  ::_exit(0);
}

}  // namespace cela::session
