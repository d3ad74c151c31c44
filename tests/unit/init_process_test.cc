// The sealed init image (jail/init_process.h): checked without starting a sandbox.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "jail/init_process.h"

namespace cela::jail {
namespace {

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

TEST(InitImage, IsOneSealedExecuteOnlyCopyOfTheLoadableImage) {
  auto image = sealed_init_image();
  ASSERT_TRUE(image) << image.error().message();
  auto again = sealed_init_image();
  ASSERT_TRUE(again);
  EXPECT_EQ(*image, *again);  // one copy per process

  struct stat st{};
  ASSERT_EQ(::fstat(*image, &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0111u);
  int seals = ::fcntl(*image, F_GET_SEALS);
  for (int seal : {F_SEAL_SEAL, F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_WRITE}) EXPECT_TRUE(seals & seal) << seal;
  EXPECT_EQ(::fcntl(*image, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_LT(::pwrite(*image, "x", 1, 0), 0);
  EXPECT_NE(::ftruncate(*image, 0), 0);

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

}  // namespace
}  // namespace cela::jail
