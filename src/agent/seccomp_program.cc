#include "agent/seccomp_program.h"

#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace cela::agent {

Result<SeccompProgram> seccomp_program_from_bytes(std::string_view bytes) {
  if (bytes.empty() || bytes.size() % sizeof(sock_filter) != 0 || bytes.size() / sizeof(sock_filter) > BPF_MAXINSNS)
    return fail(ErrorCode::internal, "seccomp program of " + std::to_string(bytes.size()) + " bytes is malformed");
  SeccompProgram program;
  program.instructions.resize(bytes.size() / sizeof(sock_filter));
  std::memcpy(program.instructions.data(), bytes.data(), bytes.size());
  return program;
}

Result<UniqueFd> seal_seccomp_program(const SeccompProgram& program) {
  UniqueFd fd(::memfd_create("cela-seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!fd) return sys_fail("memfd_create for the seccomp program");
  const char* data = reinterpret_cast<const char*>(program.instructions.data());
  size_t left = program.instructions.size() * sizeof(sock_filter);
  while (left > 0) {
    ssize_t n = ::write(fd.get(), data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return sys_fail("write the seccomp program");
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return sys_fail("seal the seccomp program");
  return fd;
}

Result<SeccompProgram> read_seccomp_program(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0) return sys_fail("stat the seccomp program");
  if (st.st_size <= 0 || static_cast<size_t>(st.st_size) > BPF_MAXINSNS * sizeof(sock_filter))
    return fail(ErrorCode::internal, "seccomp program fd has a bad size");
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    ssize_t n = ::pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return sys_fail("read the seccomp program");
    got += static_cast<size_t>(n);
  }
  return seccomp_program_from_bytes(bytes);
}

namespace {

// The kernel copies the program; it never writes through the pointer.
bool as_fprog(const SeccompProgram& program, sock_fprog& prog) {
  const size_t count = program.instructions.size();
  if (count == 0 || count > BPF_MAXINSNS) return false;
  prog.len = static_cast<unsigned short>(count);
  prog.filter = const_cast<sock_filter*>(program.instructions.data());
  return true;
}

}  // namespace

int install_seccomp(const SeccompProgram& program) {
  sock_fprog prog{};
  if (!as_fprog(program, prog)) return EINVAL;
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return errno;
  return 0;
}

Result<UniqueFd> install_seccomp_with_listener(const SeccompProgram& program) {
  sock_fprog prog{};
  if (!as_fprog(program, prog)) return fail(ErrorCode::internal, "an empty or oversized seccomp program");
  long fd = ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
  if (fd < 0) return sys_fail("install the seccomp policy with its listener");
  return UniqueFd(static_cast<int>(fd));
}

}  // namespace cela::agent
