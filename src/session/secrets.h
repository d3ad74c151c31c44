// Tenant secrets (API.md "Secrets", SECURITY.md "Secrets"): the store keeps only
// sealed values; this is where they are sealed and opened.
//
// Sealing: AES-256-GCM through OpenSSL's EVP interface, a fresh random 96-bit nonce
// per record (each PUT), the 128-bit tag appended; the additional authenticated data
// binds the record to its tenant and name, so a sealed value copied to another row
// does not open. The key is 32 random bytes in <state>/secrets.key, mode 0600, made on
// first use (O_CREAT|O_EXCL|O_NOFOLLOW: a planted symlink or a racing writer is
// refused) and read once per daemon.
//
// Plaintext copies the daemon makes live in SecretBytes, wiped (OPENSSL_cleanse) when
// they go. Copies it cannot reach (the kernel's pipe to init, init's exec environment,
// the sandbox's own memory) are outside this guarantee (docs/security.md).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "session/types.h"
#include "store/store.h"

namespace cela::session {

// A plaintext secret value: wiped on destruction and on reassignment.
class SecretBytes {
 public:
  SecretBytes() = default;
  explicit SecretBytes(std::string v) : v_(std::move(v)) {}
  SecretBytes(const SecretBytes& o) : v_(o.v_) {}
  SecretBytes(SecretBytes&& o) noexcept : v_(std::move(o.v_)) { o.wipe(); }
  SecretBytes& operator=(SecretBytes o) noexcept {
    wipe();
    v_.swap(o.v_);
    return *this;
  }
  ~SecretBytes() { wipe(); }
  const std::string& view() const { return v_; }
  void wipe();

 private:
  std::string v_;
};

// Wipes a std::string's bytes in place (a plaintext copy about to be dropped).
void wipe_string(std::string& s);

// What GET /v1/secrets shows: never a value.
struct SecretInfo {
  std::string name;
  std::string set_by;
  std::string created_at;
  std::string expires_at;  // "" = never
  int64_t ttl_s = 0;
};

// PUT /v1/secrets/{name}.
struct PutSecretSpec {
  std::string name;
  SecretBytes value;
  uint64_t ttl_s = 0;  // 0 = never expires
};

inline constexpr const char* kSecretsDir = "/run/secrets";
inline constexpr size_t kMinSecretBytes = 4;
inline constexpr size_t kMaxSecretBytes = 64 * 1024;

// Names: [A-Za-z_][A-Za-z0-9_.-]{0,127}.
Result<void> check_secret_name(std::string_view name);

class Secrets {
 public:
  Secrets(store::Store& store, std::string key_path) : store_(store), key_path_(std::move(key_path)) {}

  Result<SecretInfo> put(const Caller& caller, const std::string& set_by, PutSecretSpec spec);
  Result<std::vector<SecretInfo>> list(const Caller& caller);
  Result<void> remove(const Caller& caller, const std::string& name);
  // The plaintext of a live secret (not_found when missing or expired).
  Result<SecretBytes> open(const std::string& tenant_id, const std::string& name);

  // The primitives (public for tests): AAD = "cela-secret-v1" NUL tenant NUL name.
  static Result<std::string> seal(std::string_view key, std::string_view tenant, std::string_view name,
                                  std::string_view plaintext);
  static Result<SecretBytes> unseal(std::string_view key, std::string_view tenant, std::string_view name,
                                    std::string_view sealed);

 private:
  Result<const SecretBytes*> key();

  store::Store& store_;
  std::string key_path_;
  std::mutex key_mu_;  // leaf lock: loading the key once
  std::optional<SecretBytes> key_;
};

}  // namespace cela::session
