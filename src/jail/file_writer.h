// File writers: short-lived processes that copy a byte stream into one file on a
// sandbox's behalf, born in the sandbox's cgroups.
//
// Why a process: tmpfs and page-cache pages are charged to the memory cgroup of the
// process whose mm allocates them. Bytes the daemon writes itself land on the daemon's
// cgroup, whatever file they go to; a daemon thread cannot be charged elsewhere (a
// thread shares its process's mm). A writer is a separate process (clone3 without
// CLONE_VM) that joins the sandbox's cgroups before it writes a byte, so every page of
// the file is the sandbox's, under its memory limit.
//
// What it may do: the caller resolves and opens the destination (SessionFs: openat2 in
// the sandbox root, a fresh temp file) and hands over only that fd; the writer never
// resolves a path. Between clone3 and its copy loop it makes only raw syscalls (the
// daemon is multi-threaded): join the cgroups (v1 `tasks`; cgroup2 at clone time),
// oom_score_adj 1000 (it is the memory cgroup's first OOM victim, never init), keep
// only stdin (the pipe), stdout (the file) and stderr (a status pipe) open, drop to the
// given unprivileged ids (no capabilities left), not dumpable, no_new_privs, then
// seccomp strict mode: read(2) from its stdin, write(2) to the file and the status pipe,
// exit(2). Nothing else is possible from then on.
//
// How it ends: EOF on stdin after every byte was written: status byte 0, exit 0. A
// failed write: its errno as the status byte and the exit code (ENOSPC when the writable
// layer is full). Killed (SIGKILL): the memory
// cgroup's OOM killer chose it (the sandbox's memory is full), or the sandbox ended.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/fd.h"
#include "jail/cgroup.h"

namespace cela::jail {

// How a new process enters a cgroup: the cgroup2 node for CLONE_INTO_CGROUP (-1 when
// the host has none) and the v1 hierarchies' `tasks` files.
struct CgroupEntry {
  UniqueFd cgroup2;
  std::vector<UniqueFd> tasks;
};
Result<CgroupEntry> cgroup_entry(const Cgroup& cgroup);

struct FileWriterProcess {
  pid_t pid = -1;
  UniqueFd pidfd;   // readable once the writer has exited
  UniqueFd input;   // the write end of its stdin pipe, close-on-exec, blocking
  UniqueFd status;  // readable once it is done: one byte (0 or the errno), or EOF if killed
};

// Starts a writer of `dest` (opened for writing) in `entry`'s cgroups, running as
// uid/gid (host ids, not 0).
Result<FileWriterProcess> spawn_file_writer(const CgroupEntry& entry, UniqueFd dest, uid_t uid,
                                            gid_t gid);

// A helper: `cela <args...>` executed from the sealed init image (jail/init_process.h)
// as the sandbox's root inside the sandbox's user
// namespace, in its cgroups (the archive import, which must create directories, links
// and files owned by the sandbox's users; the directory watch, which drops to a sandbox
// user). Capabilities: only CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
// CAP_SETUID and CAP_SETGID, and those only in the sandbox's user namespace (over the
// sandbox's files and ids, never a host file); no_new_privs;
// oom_score_adj 1000. Its descriptors: 0 the input pipe, 1 the output pipe, 3 `fd3`,
// nothing else.
struct HelperProcess {
  pid_t pid = -1;
  UniqueFd pidfd;
  UniqueFd input;   // the write end of its stdin
  UniqueFd output;  // the read end of its stdout
};
Result<HelperProcess> spawn_helper(const CgroupEntry& entry, int userns_fd, const std::vector<std::string>& args,
                                   UniqueFd fd3);

// The wait status of an exited child (call once its pidfd is readable).
Result<int> reap_pidfd(int pidfd);

// Reaps an exited writer (call once its pidfd is readable) and says how it ended:
// ok, the errno of its failed write (code from the errno: limit for ENOSPC/EFBIG), or
// limit when it was killed (OOM in the sandbox's memory cgroup, or the sandbox ended).
Result<void> reap_file_writer(int pidfd);
// How it ended, from its status pipe once readable (the byte it wrote before exiting,
// so the answer does not wait for the exit itself); a writer that wrote none was killed,
// and is reaped here to say why. A writer judged by its byte still needs reaping.
Result<void> file_writer_result(int status_fd, int pidfd, bool& reaped);
// The same judgement from a wait status (pure).
Result<void> file_writer_outcome(int wait_status);

}  // namespace cela::jail
