// SHA-256 through OpenSSL's EVP interface: streaming (Sha256) and one-shot
// (sha256_hex). The one implementation for template digests, file writes and API
// key hashing.
#pragma once

#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace cela {

class Sha256 {
 public:
  Sha256();
  Sha256(Sha256&& other) noexcept;
  Sha256& operator=(Sha256&&) = delete;
  Sha256(const Sha256&) = delete;
  ~Sha256();
  void update(std::string_view data);
  // Lower-case hex; call once.
  std::string hex_final();

 private:
  evp_md_ctx_st* ctx_;
};

// Lower-case hex sha256 of `data`.
std::string sha256_hex(std::string_view data);

}  // namespace cela
