// The sealed init image (jail/init_process.h) and the tmpfs budget of a sandbox
// (jail/mounts.h): pure host-side pieces, checked without starting a sandbox.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "jail/embed/init_image_data.h"
#include "jail/init_process.h"
#include "jail/mounts.h"

namespace cela::jail {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string read_range(int fd, off_t offset, size_t size) {
  std::string out(size, '\0');
  size_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd, out.data() + got, size - got, offset + static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

void expect_sealed_execute_only(int image) {
  struct stat st{};
  ASSERT_EQ(::fstat(image, &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0111u);
  int seals = ::fcntl(image, F_GET_SEALS);
  for (int seal : {F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE}) EXPECT_TRUE(seals & seal) << seal;
  EXPECT_EQ(::fcntl(image, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_LT(::pwrite(image, "x", 1, 0), 0);
  EXPECT_NE(::ftruncate(image, 0), 0);
}

TEST(InitImage, IsOneSealedExecuteOnlyCopyOfTheEmbeddedStaticInit) {
  auto image = sealed_init_image();
  ASSERT_TRUE(image) << image.error().message();
  auto again = sealed_init_image();
  ASSERT_TRUE(again);
  EXPECT_EQ(*image, *again);  // one copy per process
  expect_sealed_execute_only(*image);

  const auto embedded = embedded_init_image();
  ASSERT_GT(embedded.size(), sizeof(Elf64_Ehdr));
  struct stat st{};
  ASSERT_EQ(::fstat(*image, &st), 0);
  ASSERT_EQ(static_cast<size_t>(st.st_size), embedded.size());
  EXPECT_EQ(read_range(*image, 0, embedded.size()), std::string(embedded.begin(), embedded.end()));
  // A static executable: no program interpreter, so no dynamic link at start.
  Elf64_Ehdr eh{};
  std::memcpy(&eh, embedded.data(), sizeof eh);
  EXPECT_EQ(std::string(reinterpret_cast<char*>(eh.e_ident), SELFMAG), ELFMAG);
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    std::memcpy(&ph, embedded.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    EXPECT_NE(ph.p_type, static_cast<uint32_t>(PT_INTERP)) << "cela-init is dynamically linked";
  }
}

TEST(HelperImage, IsOneSealedExecuteOnlyCopyOfTheLoadableImage) {
  auto image = sealed_helper_image();
  ASSERT_TRUE(image) << image.error().message();
  auto again = sealed_helper_image();
  ASSERT_TRUE(again);
  EXPECT_EQ(*image, *again);  // one copy per process
  EXPECT_NE(*image, *sealed_init_image());
  expect_sealed_execute_only(*image);
  struct stat st{};
  ASSERT_EQ(::fstat(*image, &st), 0);

  // The segments are the test binary's own bytes; the section headers are gone.
  int self = ::open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(self, 0);
  struct stat self_st{};
  ASSERT_EQ(::fstat(self, &self_st), 0);
  EXPECT_LE(st.st_size, self_st.st_size);
  Elf64_Ehdr original{}, copied{};
  ASSERT_EQ(::pread(self, &original, sizeof original, 0), static_cast<ssize_t>(sizeof original));
  ASSERT_EQ(::pread(*image, &copied, sizeof copied, 0), static_cast<ssize_t>(sizeof copied));
  EXPECT_EQ(std::string(reinterpret_cast<char*>(copied.e_ident), SELFMAG), ELFMAG);
  EXPECT_EQ(copied.e_entry, original.e_entry);
  EXPECT_EQ(copied.e_phnum, original.e_phnum);
  for (unsigned i = 0; i < original.e_phnum; ++i) {
    Elf64_Phdr ph{};
    ASSERT_EQ(::pread(self, &ph, sizeof ph, static_cast<off_t>(original.e_phoff + i * sizeof ph)),
              static_cast<ssize_t>(sizeof ph));
    ASSERT_LE(ph.p_offset + ph.p_filesz, static_cast<uint64_t>(st.st_size)) << "segment " << i;
    if (ph.p_offset == 0) continue;  // the first segment holds the (patched) ELF header
    EXPECT_EQ(read_range(*image, static_cast<off_t>(ph.p_offset), ph.p_filesz),
              read_range(self, static_cast<off_t>(ph.p_offset), ph.p_filesz))
        << "segment " << i;
  }
  if (st.st_size < self_st.st_size) {
    EXPECT_EQ(copied.e_shoff, 0u) << "trimmed, yet section headers are named";
  }
  ::close(self);
}

TEST(TmpfsBudget, NoMemoryLimitLeavesTheSpecAlone) {
  RootfsSpec spec;
  spec.disk_bytes = 10ull << 30;
  auto fitted = fit_tmpfs_to_memory(spec, 0);
  EXPECT_EQ(fitted.disk_bytes, spec.disk_bytes);
  EXPECT_EQ(fitted.shm_bytes, spec.shm_bytes);
}

TEST(TmpfsBudget, DiskAndShmLeaveAReserveForProcesses) {
  struct Case {
    uint64_t memory, disk, shm, want_disk, want_shm;
  };
  for (Case c : {
           // 512 MiB: reserve 64, room 448; the default 1 GiB disk becomes 384.
           Case{512 * kMiB, 1024 * kMiB, 64 * kMiB, 384 * kMiB, 64 * kMiB},
           // A small disk is kept as asked.
           Case{512 * kMiB, 100 * kMiB, 64 * kMiB, 100 * kMiB, 64 * kMiB},
           // 128 MiB: reserve 64 (half), room 64: shm a quarter of it.
           Case{128 * kMiB, 1024 * kMiB, 64 * kMiB, 48 * kMiB, 16 * kMiB},
           // 8 GiB: reserve an eighth (1 GiB).
           Case{8192 * kMiB, 16384 * kMiB, 64 * kMiB, 7104 * kMiB, 64 * kMiB},
       }) {
    RootfsSpec spec;
    spec.disk_bytes = c.disk;
    spec.shm_bytes = c.shm;
    auto fitted = fit_tmpfs_to_memory(spec, c.memory);
    EXPECT_EQ(fitted.disk_bytes, c.want_disk) << c.memory / kMiB << " MiB";
    EXPECT_EQ(fitted.shm_bytes, c.want_shm) << c.memory / kMiB << " MiB";
    EXPECT_LE(fitted.disk_bytes + fitted.shm_bytes + std::min<uint64_t>(64 * kMiB, c.memory / 2), c.memory);
  }
}

}  // namespace
}  // namespace cela::jail
