// SandboxTokens: the per-sandbox secrets of the E2B data plane (docs/e2b.md).
//
// E2B's SDK authenticates to a sandbox's envd with the `envdAccessToken` that create
// and connect return (sent back as X-Access-Token), and to the sandbox's other ports
// with `trafficAccessToken` (E2B-Traffic-Access-Token). cela issues both for every
// sandbox, `secure` or not: the data plane never runs code for a caller without one.
//
// A token is "<tenant id>.<hex HMAC-SHA256(daemon secret, kind, tenant id, session id)>":
// derived, so nothing is stored per sandbox and tokens survive a daemon restart; bound
// to one session of one tenant, so a token of one sandbox opens no other. The daemon's
// secret (cela serve keeps it in <state-dir>/e2b-token.key, 0600, made on first start)
// is at least 32 bytes.
//
// Threads: immutable after load(); every method is safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace cela::api::e2b {

enum class TokenKind { envd, traffic };

class SandboxTokens {
 public:
  explicit SandboxTokens(std::string secret) : secret_(std::move(secret)) {}

  std::string issue(TokenKind kind, std::string_view tenant_id, std::string_view session_id) const;
  // The tenant a token was issued to for `session_id`, if it is that session's token
  // of that kind (compared in constant time).
  std::optional<std::string> verify(TokenKind kind, std::string_view token,
                                    std::string_view session_id) const;

 private:
  std::string mac(TokenKind kind, std::string_view tenant_id, std::string_view session_id) const;
  std::string secret_;
};

}  // namespace cela::api::e2b
