#include "jail/init_process.h"

#include <elf.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>

#include "common/fd.h"
#include "common/fs.h"
#include "jail/embed/init_image_data.h"

namespace cela::jail {
namespace {

// Newer than the kernel headers of Debian 12 (Linux 6.3): a memfd that may be
// executed, and the seal that freezes its exec bits. Older kernels refuse both with
// EINVAL; every memfd is executable there and the mode is ours alone to change anyway.
constexpr unsigned kMfdExec = 0x0010U;
constexpr int kSealExec = 0x0020;

// What /proc/1/exe shows inside: "/memfd:cela-init (deleted)"; a helper's exe names
// the helper image.
constexpr char kInitImageName[] = "cela-init";
constexpr char kHelperImageName[] = "cela-helper";

// The bytes the kernel and the dynamic loader read: the ELF header, the program
// headers and every segment. The section headers and the debug sections after the
// last segment (most of a RelWithDebInfo binary) are left out. 0 when `fd` is not a
// 64-bit ELF file of this machine laid out that way: then the whole file is copied.
uint64_t loadable_size(int fd, uint64_t file_size) {
  Elf64_Ehdr eh{};
  if (::pread(fd, &eh, sizeof eh, 0) != static_cast<ssize_t>(sizeof eh)) return 0;
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum == PN_XNUM)
    return 0;
  uint64_t end = eh.e_phoff + uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr);
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    if (::pread(fd, &ph, sizeof ph, static_cast<off_t>(eh.e_phoff + i * sizeof ph)) != static_cast<ssize_t>(sizeof ph))
      return 0;
    end = std::max<uint64_t>(end, ph.p_offset + ph.p_filesz);
  }
  // The section header table must lie past the segments, or it is not ours to drop.
  if (end > file_size || (eh.e_shoff != 0 && eh.e_shoff < end)) return 0;
  return end;
}

Result<UniqueFd> new_image(const char* name) {
  UniqueFd image(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING | kMfdExec));
  if (!image && errno == EINVAL) image.reset(::memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING));
  if (!image) return sys_fail(std::string("memfd_create for the image ") + name);
  return image;
}

// Execute only: unreadable inside (see the header), and the file's owner (host root)
// is the only one who could change that. Then immutable.
Result<UniqueFd> seal_image(UniqueFd image) {
  if (::fchmod(image.get(), 0111) != 0) return sys_fail("chmod an image");
  if (::fcntl(image.get(), F_ADD_SEALS, kSealExec) != 0 && errno != EINVAL) return sys_fail("seal an image's mode");
  if (::fcntl(image.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    return sys_fail("seal an image");
  return image;
}

Result<UniqueFd> build_init_image() {
  const auto bytes = embedded_init_image();
  if (bytes.empty()) return fail(ErrorCode::internal, "this cela carries no cela-init image");
  auto image = new_image(kInitImageName);
  if (!image) return image;
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(image->get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return sys_fail("write the init image");
    done += static_cast<size_t>(n);
  }
  return seal_image(std::move(*image));
}

Result<UniqueFd> build_helper_image() {
  UniqueFd self(::open("/proc/self/exe", O_RDONLY | O_CLOEXEC));
  if (!self) return sys_fail("open /proc/self/exe");
  struct stat st{};
  if (::fstat(self.get(), &st) != 0) return sys_fail("stat /proc/self/exe");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  const uint64_t trimmed = loadable_size(self.get(), file_size);
  const uint64_t size = trimmed ? trimmed : file_size;

  auto image = new_image(kHelperImageName);
  if (!image) return image;
  off_t offset = 0;
  while (static_cast<uint64_t>(offset) < size) {
    ssize_t n = ::sendfile(image->get(), self.get(), &offset, size - static_cast<uint64_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return sys_fail("copy cela into the helper image");
  }
  if (trimmed) {
    // No section headers any more: say so, or tools reading the image would follow
    // e_shoff past its end.
    Elf64_Ehdr eh{};
    if (::pread(image->get(), &eh, sizeof eh, 0) != static_cast<ssize_t>(sizeof eh))
      return sys_fail("read the helper image's ELF header");
    eh.e_shoff = 0;
    eh.e_shnum = 0;
    eh.e_shstrndx = SHN_UNDEF;
    if (::pwrite(image->get(), &eh, sizeof eh, 0) != static_cast<ssize_t>(sizeof eh))
      return sys_fail("write the helper image's ELF header");
  }
  return seal_image(std::move(*image));
}

// One image per process, made on first use.
Result<int> once(std::mutex& mu, UniqueFd& image, Result<UniqueFd> (*build)()) {
  std::lock_guard lock(mu);
  if (!image) {
    auto built = build();
    if (!built) return std::unexpected(built.error());
    image = std::move(*built);
  }
  return image.get();
}

}  // namespace

Result<int> sealed_init_image() {
  static std::mutex mu;
  static UniqueFd image;
  return once(mu, image, build_init_image);
}

Result<int> sealed_helper_image() {
  static std::mutex mu;
  static UniqueFd image;
  return once(mu, image, build_helper_image);
}

bool can_protect_init_from_oom() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return data[CAP_TO_INDEX(CAP_SYS_RESOURCE)].effective & CAP_TO_MASK(CAP_SYS_RESOURCE);
}

Result<void> protect_init_from_oom(pid_t pid) {
  // OOM_DISABLE (-17) in the legacy file is OOM_SCORE_ADJ_MIN (-1000) in the new one;
  // only the new file also lowers the inherited floor, which would let every exec
  // make itself unkillable.
  auto r = write_file("/proc/" + std::to_string(pid) + "/oom_adj", "-17");
  // Lowering a score takes CAP_SYS_RESOURCE, which root lacks in some containers.
  // Init then keeps cela's own score, and only the execs' raised one (agent/spawn.cc)
  // makes their processes the victims.
  if (!r && (r.error().err == EACCES || r.error().err == EPERM) && !can_protect_init_from_oom()) return {};
  return r;
}

}  // namespace cela::jail
