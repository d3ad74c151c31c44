// What the host does to a sandbox's init process itself: the image it is executed
// from, and its protection from the OOM killer.
//
// Init image. Init never runs from the host's cela binary: an exec's first execve
// runs in init's memory, where /proc/self/exe would be the host file (runc's
// CVE-2019-5736). Init is cela-init (agent/init_main.cc), a small static executable
// cela carries in its read-only data (jail/embed/), executed from a sealed memfd copy
// of it, mode 0111: runnable, not readable by anyone inside, immutable (write, grow,
// shrink and seal sealed). Static and small, it costs a sandbox neither a copy of
// cela nor a dynamic link at start. The unreadable image also decides who owns
// init's /proc entries: the kernel moves the mm of a process whose executable it
// cannot read to the nearest user namespace that owns the file (would_dump(),
// fs/exec.c), here the host's, so /proc/1/* belongs to host root and sandbox root
// can neither write oom_score_adj, coredump_filter or clear_refs, nor list init's
// fds, nor open /proc/1/exe. One copy per host process (the daemon makes it once),
// shared by every sandbox it starts.
//
// Helper image. The daemon's helpers inside a session (archive import, directory
// watch: jail/file_writer.h) run cela's own subcommands, so they are executed from a
// second sealed image with the same properties: the loadable part of cela itself (the
// ELF segments; no debug sections), made on first use.
//
// OOM. Init is never the OOM victim: the host sets its score to OOM_SCORE_ADJ_MIN
// through the legacy oom_adj file, which (unlike oom_score_adj) leaves the floor that
// children inherit (oom_score_adj_min) at 0. Each exec raises its own score to the
// maximum before it runs (agent/spawn.cc), and neither it nor its children may go
// below 0 again. Lowering a score takes CAP_SYS_RESOURCE; where host root lacks it
// (some containers) init keeps cela's own score and only the raised execs protect it.
#pragma once

#include <sys/types.h>

#include "common/error.h"

namespace cela::jail {

// The sealed cela-init image, made on first use; the fd stays open (close-on-exec)
// for the life of the process. Thread-safe.
Result<int> sealed_init_image();

// The sealed image of this process's own executable (cela), for helpers; made on
// first use, kept like the init image. Thread-safe.
Result<int> sealed_helper_image();

// Makes `pid` (a freshly cloned init, before it starts anything) unkillable by the
// OOM killer, in a way it cannot pass on below 0 to its children. Without
// CAP_SYS_RESOURCE the score stays as it is (see can_protect_init_from_oom).
Result<void> protect_init_from_oom(pid_t pid);

// Whether this process may lower an OOM score (CAP_SYS_RESOURCE is effective).
bool can_protect_init_from_oom();

}  // namespace cela::jail
