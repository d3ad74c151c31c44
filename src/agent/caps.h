// Capabilities for sandbox processes. The bounding set keeps only what an
// in-sandbox root needs (Docker's default set minus NET_RAW and MKNOD); an exec as
// `user` ends with no capability at all after execve.
#pragma once

#include <vector>

namespace cela::agent {

// Capabilities kept in the bounding set (CAP_* numbers), for review and tests.
const std::vector<int>& kept_capabilities();

// Drops every capability not in kept_capabilities() from the bounding set and
// clears the ambient set. Needs CAP_SETPCAP (the caller is still ns-root).
// Async-signal-safe (raw prctl). Returns 0 or an errno.
int drop_bounding_set();

// After setresuid: make effective and permitted exactly `keep` (CAP_* numbers) and
// inheritable empty, via capset(2). `keep` may name capabilities already dropped
// from the bounding set (e.g. CAP_SYS_ADMIN to load seccomp without
// no_new_privs) as long as they are still permitted. Async-signal-safe. Returns 0
// or an errno (EINVAL for a number outside 0..63, EPERM for a cap not permitted).
int set_capabilities(const std::vector<int>& keep);

}  // namespace cela::agent
