// The cela-init image (agent/init_main.cc, stripped), embedded in cela's read-only
// data: jail/init_process.cc seals a copy of these bytes into the memfd every
// sandbox's init is executed from. Built without ccache (CMakeLists.txt): the
// assembler reads the file, the preprocessor never sees it.
#include <cstddef>

#include "jail/embed/init_image_data.h"

#ifndef CELA_INIT_IMAGE_PATH
#error "CELA_INIT_IMAGE_PATH names the stripped cela-init (CMakeLists.txt)"
#endif

asm(".section .rodata.cela_init_image, \"a\", @progbits\n"
    ".balign 64\n"
    ".globl cela_init_image_begin\n"
    "cela_init_image_begin:\n"
    ".incbin \"" CELA_INIT_IMAGE_PATH "\"\n"
    ".globl cela_init_image_end\n"
    "cela_init_image_end:\n"
    ".previous\n");

extern "C" const unsigned char cela_init_image_begin[];
extern "C" const unsigned char cela_init_image_end[];

namespace cela::jail {

std::span<const unsigned char> embedded_init_image() {
  return {cela_init_image_begin, static_cast<size_t>(cela_init_image_end - cela_init_image_begin)};
}

}  // namespace cela::jail
