#include "common/sha256.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <utility>

namespace cela {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Allocation failure of a few hundred bytes or a broken OpenSSL: nothing sensible
  // to return to.
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::Sha256(Sha256&& other) noexcept : ctx_(std::exchange(other.ctx_, nullptr)) {}

Sha256::~Sha256() {
  if (ctx_ != nullptr) EVP_MD_CTX_free(ctx_);
}

void Sha256::update(std::string_view data) {
  if (!data.empty()) EVP_DigestUpdate(ctx_, data.data(), data.size());
}

std::string Sha256::hex_final() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_, md, &len);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned i = 0; i < len; ++i) {
    out.push_back(kHex[md[i] >> 4]);
    out.push_back(kHex[md[i] & 0xf]);
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex_final();
}

}  // namespace cela
