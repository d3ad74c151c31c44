#include "api/e2b/tokens.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/encoding.h"

namespace cela::api::e2b {

namespace {

std::string_view kind_label(TokenKind kind) {
  return kind == TokenKind::envd ? "envd" : "traffic";
}

}  // namespace

std::string SandboxTokens::mac(TokenKind kind, std::string_view tenant_id,
                               std::string_view session_id) const {
  std::string message;
  message.append(kind_label(kind)).push_back('\0');
  message.append(tenant_id).push_back('\0');
  message.append(session_id);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), secret_.data(), static_cast<int>(secret_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len);
  return hex_encode(std::string_view(reinterpret_cast<const char*>(out), len));
}

std::string SandboxTokens::issue(TokenKind kind, std::string_view tenant_id,
                                 std::string_view session_id) const {
  return std::string(tenant_id) + "." + mac(kind, tenant_id, session_id);
}

std::optional<std::string> SandboxTokens::verify(TokenKind kind, std::string_view token,
                                                 std::string_view session_id) const {
  auto dot = token.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  std::string_view tenant = token.substr(0, dot);
  std::string want = mac(kind, tenant, session_id);
  std::string_view got = token.substr(dot + 1);
  if (got.size() != want.size() || CRYPTO_memcmp(got.data(), want.data(), want.size()) != 0)
    return std::nullopt;
  return std::string(tenant);
}

}  // namespace cela::api::e2b
