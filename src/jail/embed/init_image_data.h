// The bytes of the cela-init executable cela carries (init_image_data.cc).
#pragma once

#include <span>

namespace cela::jail {

// The whole stripped static ELF file of cela-init; never empty in a built cela.
std::span<const unsigned char> embedded_init_image();

}  // namespace cela::jail
