// The seccomp policy as three tables (allowed, always denied, decided by arguments)
// and its compilation with libseccomp into a classic BPF program, x86_64 only.
//
// How libseccomp 2.5.4 combines several rules for one syscall (measured; the
// behaviour tests in tests/unit/seccomp_test.cc guard it):
//  1. An unconditional rule absorbs every conditional rule for the same syscall,
//     whatever the insertion order or action: "ioctl: allow" plus "ioctl(TIOCSTI):
//     EPERM" lets TIOCSTI through. So a syscall with argument rules is never in the
//     allowlist, and its fallback verdict is itself a conditional rule.
//  2. A comparison libseccomp sees as always true (MASKED_EQ with mask 0) is folded
//     into an unconditional rule, hitting 1. `arg0 >= 0` (unsigned, always true) is
//     not folded, so it serves as the "otherwise" condition.
//  3. Comparisons on one syscall are tested in a fixed order, not insertion order
//     (db.c _db_chain_lt): higher argument index first; on the same argument
//     EQ/MASKED_EQ before LT/LE before GT/GE. A failed nested comparison falls
//     through to the next candidate. Hence: cases use MASKED_EQ only, the fallback
//     is `arg0 >= 0`, and every case is tested before the fallback.
#include "jail/seccomp.h"
#include "common/fs.h"
#include <cstring>
#include <dirent.h>
#include <fcntl.h>

#include <linux/netlink.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/fd.h"

namespace cela::jail {
namespace {

using Action = SyscallRule::Action;

// Syscalls not in any table fail with ENOSYS: libc and runtimes treat it as "this
// kernel is too old" and fall back (clone3 -> clone, fchmodat2 -> fchmodat, ...).
const uint32_t kDefaultAction = SCMP_ACT_ERRNO(ENOSYS);

// Allowed whatever the arguments. Close to Docker's default profile (moby
// profiles/seccomp/default.json), x86_64 names only. Differences from Docker:
// no ptrace, process_vm_*, kcmp, adjtimex, clock_adjtime, name_to_handle_at,
// modify_ldt, memfd_secret, io_uring_*, Linux AIO (io_setup...), fanotify_mark (see
// the denied table);
// chroot is allowed (in-sandbox root keeps CAP_SYS_CHROOT in its own userns).
// clone, socket, socketpair, ioctl and personality are in kArgumentRules.
// clang-format off
constexpr std::string_view kAllowed[] = {
    // File descriptors and file I/O
    "read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "preadv2", "pwritev",
    "pwritev2", "open", "openat", "openat2", "creat", "close", "close_range", "dup", "dup2",
    "dup3", "pipe", "pipe2", "lseek", "fcntl", "flock", "fsync", "fdatasync", "sync", "syncfs",
    "sync_file_range", "truncate", "ftruncate", "fallocate", "fadvise64", "readahead",
    "copy_file_range", "sendfile", "splice", "tee", "vmsplice", "cachestat",
    // File metadata and directories
    "stat", "fstat", "lstat", "newfstatat", "statx", "statfs", "fstatfs", "access", "faccessat",
    "faccessat2", "getdents", "getdents64", "readlink", "readlinkat", "mkdir", "mkdirat",
    "mknod", "mknodat",  // FIFOs and sockets; device nodes need CAP_MKNOD, never kept
    "rmdir", "rename", "renameat", "renameat2", "link", "linkat", "symlink", "symlinkat",
    "unlink", "unlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown",
    "fchownat", "lchown", "utime", "utimes", "utimensat", "futimesat", "umask", "getcwd",
    "chdir", "fchdir",
    "chroot",  // in-sandbox root may chroot inside its own mount namespace
    "getxattr", "lgetxattr", "fgetxattr", "setxattr", "lsetxattr", "fsetxattr", "listxattr",
    "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
    // Polling and event fds (epoll loops of node/libuv, asyncio)
    "poll", "ppoll", "select", "pselect6", "epoll_create", "epoll_create1", "epoll_ctl",
    "epoll_wait", "epoll_pwait", "epoll_pwait2", "eventfd", "eventfd2", "inotify_init",
    "inotify_init1", "inotify_add_watch", "inotify_rm_watch", "timerfd_create",
    "timerfd_settime", "timerfd_gettime", "signalfd", "signalfd4",
    // Memory
    "brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore", "msync", "mlock",
    "mlock2", "mlockall", "munlock", "munlockall", "remap_file_pages", "memfd_create",
    "pkey_alloc", "pkey_free", "pkey_mprotect", "map_shadow_stack",
    // Processes and threads (clone is in kArgumentRules; clone3 is ENOSYS)
    "execve", "execveat", "fork", "vfork", "exit", "exit_group", "wait4", "waitid",
    "set_tid_address", "set_robust_list", "get_robust_list", "futex", "futex_waitv",
    "futex_wake", "futex_wait", "futex_requeue", "rseq", "membarrier",
    "arch_prctl",  // x86_64 TLS setup (ARCH_SET_FS)
    "set_thread_area", "get_thread_area",
    "prctl",  // thread names, no_new_privs, PR_CAPBSET_DROP (only ever lowers privilege)
    "seccomp",  // stacking a filter only restricts further
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    "sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getattr",
    "sched_setattr", "sched_getparam", "sched_setparam", "sched_getscheduler",
    "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
    "sched_rr_get_interval", "getpriority", "setpriority", "ioprio_get", "ioprio_set",
    "getrlimit", "setrlimit", "prlimit64", "getrusage", "times", "getcpu",
    // Identity: in-sandbox root runs apt/dpkg and sudo (setuid, setgroups, capset)
    "getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
    "getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "setuid",
    "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid",
    "setfsgid", "capget", "capset",
    // Signals
    "kill", "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask", "rt_sigpending",
    "rt_sigsuspend", "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "rt_sigreturn", "sigaltstack", "restart_syscall", "pidfd_open", "pidfd_send_signal",
    "process_mrelease",
    // Time and sleeping (reading clocks only; setting them is denied)
    "clock_gettime", "clock_getres", "clock_nanosleep", "gettimeofday", "time", "nanosleep",
    "alarm", "pause", "getitimer", "setitimer", "timer_create", "timer_settime",
    "timer_gettime", "timer_getoverrun", "timer_delete",
    // Sockets (socket and socketpair are in kArgumentRules)
    "bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername",
    "getsockopt", "setsockopt", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg",
    "recvmmsg", "shutdown",
    // SysV and POSIX IPC (the session has its own ipc namespace)
    "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
    "shmget", "shmat", "shmdt", "shmctl", "mq_open", "mq_unlink", "mq_timedsend",
    "mq_timedreceive", "mq_notify", "mq_getsetattr",
    // System information
    "uname", "sysinfo", "getrandom",
};
// clang-format on

// One case of an argument rule: `action` when every comparison holds. Cases use
// MASKED_EQ only (see rule 3 at the top of this file).
struct ArgCase {
  uint32_t action;
  std::vector<scmp_arg_cmp> when;
};

// A syscall whose verdict depends on its arguments: the first matching case, else
// `otherwise`.
struct ArgRule {
  std::string_view syscall;
  std::vector<ArgCase> cases;
  uint32_t otherwise;
};

// `arg`'s low 32 bits equal `value`. For int arguments (the kernel truncates them):
// a caller cannot dodge the comparison with garbage in the high bits, and a
// sign-extended int still matches.
scmp_arg_cmp low32_eq(unsigned arg, uint32_t value) {
  return {arg, SCMP_CMP_MASKED_EQ, 0xffffffffULL, value};
}

// None of `bits` set in `arg`.
scmp_arg_cmp bits_clear(unsigned arg, uint64_t bits) {
  return {arg, SCMP_CMP_MASKED_EQ, bits, 0};
}

constexpr uint64_t kNamespaceFlags = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER |
                                     CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWCGROUP | CLONE_NEWTIME;

// The rules, with `eperm` standing for the recorded denial (kViolationErrno, or a
// notification when violations are watched).
std::vector<ArgRule> argument_rules(uint32_t eperm) {
  const uint32_t allow = SCMP_ACT_ALLOW;
  // EAFNOSUPPORT rather than EPERM: libaudit users (sudo, useradd, passwd) treat it
  // as "no audit in this kernel" and carry on; EPERM makes them abort.
  const uint32_t no_family = SCMP_ACT_ERRNO(EAFNOSUPPORT);
  return {
      // fork and threads, but no new namespaces. x86_64 clone: flags are arg 0.
      {"clone", {{allow, {bits_clear(0, kNamespaceFlags)}}}, eperm},
      // Unix and IP sockets; netlink only for NETLINK_ROUTE (getaddrinfo, `ip addr`).
      // No AF_PACKET, AF_VSOCK, netlink audit/uevent/diag, or any other family.
      {"socket",
       {{allow, {low32_eq(0, AF_UNIX)}},
        {allow, {low32_eq(0, AF_INET)}},
        {allow, {low32_eq(0, AF_INET6)}},
        {allow, {low32_eq(0, AF_NETLINK), low32_eq(2, NETLINK_ROUTE)}}},
       no_family},
      {"socketpair", {{allow, {low32_eq(0, AF_UNIX)}}}, no_family},
      // Terminal injection (TIOCSTI pushes input into the tty; TIOCLINUX can too).
      // The request is an unsigned int in the kernel: compare the low 32 bits.
      {"ioctl", {{eperm, {low32_eq(1, TIOCSTI)}}, {eperm, {low32_eq(1, TIOCLINUX)}}}, allow},
      // Docker's list: PER_LINUX, PER_LINUX32, UNAME26 variants and the query.
      // Anything else (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC...) weakens the process.
      {"personality",
       {{allow, {low32_eq(0, 0x0)}},
        {allow, {low32_eq(0, 0x0008)}},
        {allow, {low32_eq(0, 0x20000)}},
        {allow, {low32_eq(0, 0x20008)}},
        {allow, {low32_eq(0, 0xffffffff)}}},
       eperm},
  };
}

const std::vector<ArgRule>& standalone_argument_rules() {
  static const auto& rules = *new std::vector<ArgRule>(argument_rules(SCMP_ACT_ERRNO(kViolationErrno)));
  return rules;
}

uint32_t to_scmp_action(Action action, bool watched) {
  switch (action) {
    case Action::allow:
      return SCMP_ACT_ALLOW;
    case Action::deny_eperm:
      return watched ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(kViolationErrno);
    case Action::deny_enosys:
      return SCMP_ACT_ERRNO(ENOSYS);
  }
  return SCMP_ACT_KILL_PROCESS;
}

struct FilterDeleter {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using Filter = std::unique_ptr<void, FilterDeleter>;

// libseccomp returns -errno.
std::unexpected<Error> seccomp_fail(std::string context, int rc) {
  return sys_fail(std::move(context), -rc);
}

Result<int> resolve(std::string_view name) {
  const std::string n(name);
  const int nr = seccomp_syscall_resolve_name(n.c_str());
  // Negative numbers are libseccomp's pseudo-syscalls: names of other architectures.
  if (nr < 0) return fail(ErrorCode::internal, "seccomp: no x86_64 syscall named " + n);
  return nr;
}

Result<void> add_rule(scmp_filter_ctx ctx, uint32_t action, std::string_view name,
                      const std::vector<scmp_arg_cmp>& when = {}) {
  auto nr = resolve(name);
  if (!nr) return std::unexpected(nr.error());
  const int rc = seccomp_rule_add_exact_array(ctx, action, *nr, when.size(), when.data());
  if (rc < 0) return seccomp_fail("seccomp_rule_add " + std::string(name), rc);
  return {};
}

Result<void> add_argument_rule(scmp_filter_ctx ctx, const ArgRule& rule) {
  for (const ArgCase& c : rule.cases) {
    for (const scmp_arg_cmp& cmp : c.when) {
      if (cmp.op != SCMP_CMP_MASKED_EQ || cmp.datum_a == 0)  // datum_a is the mask
        return fail(ErrorCode::internal, "seccomp: argument case of " + std::string(rule.syscall) +
                                             " must be a MASKED_EQ with a nonzero mask");
    }
    if (auto r = add_rule(ctx, c.action, rule.syscall, c.when); !r) return r;
  }
  // The fallback: always true, but tested after every case (rules 2 and 3 above).
  return add_rule(ctx, rule.otherwise, rule.syscall, {{0, SCMP_CMP_GE, 0, 0}});
}

// seccomp_export_bpf only writes to an fd: go through a memfd.
Result<std::vector<sock_filter>> export_bpf(scmp_filter_ctx ctx) {
  UniqueFd fd(::memfd_create("cela-seccomp", MFD_CLOEXEC));
  if (!fd) return sys_fail("memfd_create for the seccomp program");
  if (int rc = seccomp_export_bpf(ctx, fd.get()); rc < 0)
    return seccomp_fail("seccomp_export_bpf", rc);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return sys_fail("fstat seccomp memfd");
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0 || size % sizeof(sock_filter) != 0)
    return fail(ErrorCode::internal,
                "seccomp_export_bpf: odd program size " + std::to_string(size));
  if (size / sizeof(sock_filter) > BPF_MAXINSNS)
    return fail(ErrorCode::limit, "seccomp program longer than BPF_MAXINSNS");
  std::vector<sock_filter> program(size / sizeof(sock_filter));
  size_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd.get(), reinterpret_cast<char*>(program.data()) + done, size - done, done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys_fail("read seccomp memfd");
    if (n == 0) return fail(ErrorCode::internal, "seccomp memfd: short read");
    done += static_cast<size_t>(n);
  }
  return program;
}

}  // namespace

const std::vector<std::string>& seccomp_allowed_syscalls() {
  static const auto& names =
      *new std::vector<std::string>(std::begin(kAllowed), std::end(kAllowed));
  return names;
}

const std::vector<SyscallRule>& seccomp_denied_syscalls() {
  using enum Action;
  // clang-format off
  static const auto& rules = *new std::vector<SyscallRule>{
      // Loading or replacing kernel code
      {"kexec_load", deny_eperm}, {"kexec_file_load", deny_eperm},
      {"init_module", deny_eperm}, {"finit_module", deny_eperm},
      {"delete_module", deny_eperm}, {"create_module", deny_eperm},
      {"get_kernel_syms", deny_eperm}, {"query_module", deny_eperm},
      {"uselib", deny_eperm}, {"bpf", deny_eperm},
      // Large kernel attack surface, little use in a sandbox
      {"perf_event_open", deny_eperm}, {"userfaultfd", deny_eperm},
      {"io_uring_setup", deny_eperm},  // libuv and others fall back to epoll/threads
      {"io_uring_enter", deny_eperm}, {"io_uring_register", deny_eperm},
      {"lookup_dcookie", deny_eperm}, {"nfsservctl", deny_eperm},
      // Kernel keyrings are not namespaced
      {"keyctl", deny_eperm}, {"add_key", deny_eperm}, {"request_key", deny_eperm},
      // Mount table and namespaces: fixed by cela before exec
      {"mount", deny_eperm}, {"umount2", deny_eperm}, {"pivot_root", deny_eperm},
      {"unshare", deny_eperm}, {"setns", deny_eperm}, {"fsopen", deny_eperm},
      {"fsconfig", deny_eperm}, {"fsmount", deny_eperm}, {"fspick", deny_eperm},
      {"open_tree", deny_eperm}, {"move_mount", deny_eperm}, {"mount_setattr", deny_eperm},
      // Namespaces with threads: glibc falls back to clone (rules above) only on ENOSYS
      {"clone3", deny_enosys},
      // Linux AIO: every context takes from one host-wide table (fs.aio-max-nr) that no
      // cgroup bounds, so one session could leave none for anyone. ENOSYS is what a
      // kernel without AIO answers: libaio users (databases) fall back to threads.
      {"io_setup", deny_enosys}, {"io_destroy", deny_enosys}, {"io_submit", deny_enosys},
      {"io_cancel", deny_enosys}, {"io_getevents", deny_enosys}, {"io_pgetevents", deny_enosys},
      // File handles bypass path lookup (the classic container escape)
      {"open_by_handle_at", deny_eperm}, {"name_to_handle_at", deny_eperm},
      // Other processes' memory and fds (no gdb/strace inside a sandbox)
      {"ptrace", deny_eperm}, {"process_vm_readv", deny_eperm},
      {"process_vm_writev", deny_eperm}, {"process_madvise", deny_eperm},
      {"pidfd_getfd", deny_eperm}, {"kcmp", deny_eperm},
      // Host-wide state: swap, power, kernel log, accounting, clocks, quotas, I/O ports
      {"swapon", deny_eperm}, {"swapoff", deny_eperm}, {"reboot", deny_eperm},
      {"syslog", deny_eperm}, {"acct", deny_eperm}, {"settimeofday", deny_eperm},
      {"clock_settime", deny_eperm}, {"clock_adjtime", deny_eperm},
      {"adjtimex", deny_eperm}, {"iopl", deny_eperm}, {"ioperm", deny_eperm},
      {"quotactl", deny_eperm}, {"quotactl_fd", deny_eperm},
      {"vhangup", deny_eperm},  // hangs up the terminal for every process on it
  };
  // clang-format on
  return rules;
}

const std::vector<std::string>& seccomp_argument_filtered_syscalls() {
  static const auto& names = *[] {
    auto* v = new std::vector<std::string>;
    for (const ArgRule& rule : standalone_argument_rules()) v->emplace_back(rule.syscall);
    return v;
  }();
  return names;
}

Result<SeccompProgram> build_seccomp_program(SeccompWatch watch) {
  Filter filter(seccomp_init(kDefaultAction));
  if (!filter) return fail(ErrorCode::internal, "seccomp_init");
  scmp_filter_ctx ctx = filter.get();
  // seccomp_init's filter covers only the native arch (x86_64); everything else,
  // i386 (int 0x80) and x32 (nr | 0x40000000) included, kills the process.
  if (int rc = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS); rc < 0)
    return seccomp_fail("seccomp_attr_set ACT_BADARCH", rc);

  for (std::string_view name : kAllowed) {
    const bool exec = name == "execve" || name == "execveat";
    const uint32_t action = exec && watch.execs ? SCMP_ACT_NOTIFY : SCMP_ACT_ALLOW;
    if (auto r = add_rule(ctx, action, name); !r) return std::unexpected(r.error());
  }
  for (const SyscallRule& rule : seccomp_denied_syscalls()) {
    const uint32_t action = to_scmp_action(rule.action, watch.violations);
    // libseccomp refuses (EACCES) a rule equal to the default action; such a
    // syscall (clone3) gets that errno from the default already. Still resolve the
    // name so a typo fails the build.
    if (action == kDefaultAction) {
      if (auto nr = resolve(rule.name); !nr) return std::unexpected(nr.error());
      continue;
    }
    if (auto r = add_rule(ctx, action, rule.name); !r) return std::unexpected(r.error());
  }
  for (const ArgRule& rule : argument_rules(watch.violations ? SCMP_ACT_NOTIFY : SCMP_ACT_ERRNO(kViolationErrno)))
    if (auto r = add_argument_rule(ctx, rule); !r) return std::unexpected(r.error());

  auto instructions = export_bpf(ctx);
  if (!instructions) return std::unexpected(instructions.error());
  return SeccompProgram{std::move(*instructions)};
}

namespace {

// The cache keeps the programs of the kSeccompCacheEntries builds that used it last:
// several cela builds on one host (an upgrade in progress, a test build beside the
// installed one) each keep their own, and a new build evicts only the least recently
// used. (Evicting every other entry on a miss made two builds recompile each other's.)
void evict_old_programs(const std::string& cache_dir) {
  DIR* dir = ::opendir(cache_dir.c_str());
  if (!dir) return;
  std::vector<std::pair<int64_t, std::string>> entries;  // (mtime ns, name)
  while (const dirent* entry = ::readdir(dir)) {
    std::string_view name = entry->d_name;
    if (!name.starts_with("seccomp-") || !name.ends_with(".bpf")) continue;
    struct stat st{};
    if (::fstatat(::dirfd(dir), entry->d_name, &st, 0) != 0) continue;
    entries.emplace_back(int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec, std::string(name));
  }
  // Room for the one about to be written.
  if (entries.size() >= kSeccompCacheEntries) {
    std::sort(entries.begin(), entries.end());
    for (size_t i = 0; i + kSeccompCacheEntries <= entries.size(); ++i)
      ::unlinkat(::dirfd(dir), entries[i].second.c_str(), 0);
  }
  ::closedir(dir);
}

}  // namespace

Result<SeccompProgram> cached_seccomp_program(SeccompWatch watch, const std::string& cache_dir) {
  struct stat self{};
  if (::stat("/proc/self/exe", &self) != 0) return build_seccomp_program(watch);
  std::string path = cache_dir + "/seccomp-" + std::to_string(self.st_dev) + "-" + std::to_string(self.st_ino) +
                     "-" + std::to_string(self.st_size) + "-" + std::to_string(self.st_mtim.tv_sec) + "." +
                     std::to_string(self.st_mtim.tv_nsec) + (watch.execs ? "-x" : "") +
                     (watch.violations ? "-v" : "") + ".bpf";
  if (auto cached = read_file(path))
    if (auto program = agent::seccomp_program_from_bytes(*cached)) {
      ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);  // used now: the last to go
      return program;
    }
  auto program = build_seccomp_program(watch);
  if (!program) return program;
  evict_old_programs(cache_dir);
  // Best effort: a failed cache write only costs the next run a compile.
  std::string tmp = path + ".tmp" + std::to_string(::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd) {
    size_t bytes = program->instructions.size() * sizeof(sock_filter);
    bool ok = ::write(fd.get(), program->instructions.data(), bytes) == static_cast<ssize_t>(bytes);
    fd.reset();
    if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) ::unlink(tmp.c_str());
  }
  return program;
}

}  // namespace cela::jail
