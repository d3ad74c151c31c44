#include "common/random.h"

#include <openssl/rand.h>

#include <cstdio>
#include <cstdlib>

#include "common/encoding.h"

namespace cela {

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    std::fputs("cela: RAND_bytes failed; refusing to issue ids or keys without entropy\n", stderr);
    std::abort();
  }
  return out;
}

std::string random_id(std::string_view prefix) { return std::string(prefix) + "-" + hex_encode(random_bytes(8)); }

}  // namespace cela
