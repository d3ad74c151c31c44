#include "session/secrets.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <memory>

#include "common/encoding.h"
#include "common/random.h"

namespace cela::session {
namespace {

constexpr size_t kKeyBytes = 32, kNonceBytes = 12, kTagBytes = 16;

struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

std::string aad_of(std::string_view tenant, std::string_view name) {
  std::string aad = "cela-secret-v1";
  aad += '\0';
  aad += tenant;
  aad += '\0';
  aad += name;
  return aad;
}

Error crypto_fail(std::string_view what) { return Error{ErrorCode::internal, 0, "secret " + std::string(what)}; }

// Reads the key file, or makes it (O_EXCL) when it does not exist yet.
Result<SecretBytes> load_or_make_key(const std::string& path) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      std::string key(kKeyBytes, '\0');
      ssize_t n = ::fstat(fd, &st) == 0 ? ::read(fd, key.data(), key.size()) : -1;
      ::close(fd);
      SecretBytes out(std::move(key));
      if (!S_ISREG(st.st_mode) || (st.st_mode & 077) != 0 || st.st_uid != ::geteuid())
        return fail(ErrorCode::internal, path + " must be a regular file of the daemon's user, mode 0600");
      if (n != static_cast<ssize_t>(kKeyBytes)) return fail(ErrorCode::internal, path + " is not a 32-byte key");
      return out;
    }
    if (errno != ENOENT) return sys_fail("open " + path);
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) continue;  // another daemon made it meanwhile
      return sys_fail("create " + path);
    }
    SecretBytes key(random_bytes(kKeyBytes));
    bool ok = ::write(fd, key.view().data(), kKeyBytes) == static_cast<ssize_t>(kKeyBytes) && ::fsync(fd) == 0;
    ::close(fd);
    if (!ok) {
      ::unlink(path.c_str());
      return sys_fail("write " + path);
    }
    return key;
  }
  return fail(ErrorCode::internal, "cannot open or create " + path);
}

SecretInfo info_of(const store::SecretRecord& r) {
  return SecretInfo{r.name, r.set_by, r.created_at, r.expires_at, r.ttl_s};
}

}  // namespace

void SecretBytes::wipe() {
  if (!v_.empty()) OPENSSL_cleanse(v_.data(), v_.size());
  v_.clear();
}

void wipe_string(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
  s.clear();
}

Result<void> check_secret_name(std::string_view name) {
  auto bad = [&] {
    return fail(ErrorCode::invalid_argument,
                "secret name must be 1-128 of [A-Za-z0-9_.-], starting with a letter or '_'");
  };
  if (name.empty() || name.size() > 128) return bad();
  char c0 = name[0];
  if (!((c0 >= 'A' && c0 <= 'Z') || (c0 >= 'a' && c0 <= 'z') || c0 == '_')) return bad();
  for (char c : name)
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
          c == '-'))
      return bad();
  return {};
}

Result<std::string> Secrets::seal(std::string_view key, std::string_view tenant, std::string_view name,
                                  std::string_view plaintext) {
  if (key.size() != kKeyBytes) return std::unexpected(crypto_fail("key has the wrong size"));
  std::string nonce = random_bytes(kNonceBytes);
  std::string aad = aad_of(tenant, name);
  Ctx ctx(EVP_CIPHER_CTX_new());
  if (!ctx) return std::unexpected(crypto_fail("cipher context"));
  std::string out = nonce;
  out.resize(kNonceBytes + plaintext.size() + kTagBytes);
  auto u = [](std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); };
  auto* o = reinterpret_cast<unsigned char*>(out.data());
  int len = 0, fin = 0;
  if (EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, u(key), u(nonce)) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &len, u(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), o + kNonceBytes, &len, u(plaintext), static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), o + kNonceBytes + len, &fin) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, o + kNonceBytes + plaintext.size()) != 1)
    return std::unexpected(crypto_fail("encryption failed"));
  return base64_encode(out);
}

Result<SecretBytes> Secrets::unseal(std::string_view key, std::string_view tenant, std::string_view name,
                                    std::string_view sealed) {
  if (key.size() != kKeyBytes) return std::unexpected(crypto_fail("key has the wrong size"));
  auto raw = base64_decode(sealed);
  if (!raw || raw->size() < kNonceBytes + kTagBytes) return std::unexpected(crypto_fail("record is malformed"));
  std::string_view all(*raw);
  std::string_view nonce = all.substr(0, kNonceBytes);
  std::string_view ct = all.substr(kNonceBytes, all.size() - kNonceBytes - kTagBytes);
  std::string tag(all.substr(all.size() - kTagBytes));
  std::string aad = aad_of(tenant, name);
  Ctx ctx(EVP_CIPHER_CTX_new());
  if (!ctx) return std::unexpected(crypto_fail("cipher context"));
  SecretBytes plain(std::string(ct.size(), '\0'));
  auto u = [](std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); };
  auto* p = reinterpret_cast<unsigned char*>(const_cast<char*>(plain.view().data()));
  int len = 0, fin = 0;
  if (EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, u(key), u(nonce)) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &len, u(aad), static_cast<int>(aad.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), p, &len, u(ct), static_cast<int>(ct.size())) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), p + len, &fin) != 1)
    return std::unexpected(crypto_fail("record does not authenticate (wrong key, tenant or name)"));
  return plain;
}

Result<const SecretBytes*> Secrets::key() {
  std::lock_guard lock(key_mu_);
  if (!key_) {
    auto k = load_or_make_key(key_path_);
    if (!k) return std::unexpected(k.error());
    key_ = std::move(*k);
  }
  return &*key_;
}

Result<SecretInfo> Secrets::put(const Caller& caller, const std::string& set_by, PutSecretSpec spec) {
  if (auto r = check_secret_name(spec.name); !r) return std::unexpected(r.error());
  size_t n = spec.value.view().size();
  if (n < kMinSecretBytes || n > kMaxSecretBytes)
    return fail(ErrorCode::invalid_argument, "field `value` must be " + std::to_string(kMinSecretBytes) + " to " +
                                                 std::to_string(kMaxSecretBytes) +
                                                 " bytes (shorter values would redact ordinary text)");
  auto k = key();
  if (!k) return std::unexpected(k.error());
  auto sealed = seal((*k)->view(), caller.tenant_id, spec.name, spec.value.view());
  if (!sealed) return std::unexpected(sealed.error());
  store::SecretRecord r;
  r.tenant_id = caller.tenant_id;
  r.name = spec.name;
  r.sealed = std::move(*sealed);
  r.set_by = set_by;
  int64_t now = store::now_ms();
  r.created_at = store::format_rfc3339(now);
  r.ttl_s = static_cast<int64_t>(spec.ttl_s);
  if (spec.ttl_s) r.expires_at = store::format_rfc3339(now + r.ttl_s * 1000);
  if (auto w = store_.put_secret(r); !w) return std::unexpected(w.error());
  return info_of(r);
}

Result<std::vector<SecretInfo>> Secrets::list(const Caller& caller) {
  auto rows = store_.list_secrets(caller.tenant_id, store::now_rfc3339());
  if (!rows) return std::unexpected(rows.error());
  std::vector<SecretInfo> out;
  for (const auto& r : *rows) out.push_back(info_of(r));
  return out;
}

Result<void> Secrets::remove(const Caller& caller, const std::string& name) {
  if (auto r = check_secret_name(name); !r) return std::unexpected(r.error());
  auto gone = store_.delete_secret(caller.tenant_id, name);
  if (!gone) return std::unexpected(gone.error());
  if (!*gone) return fail(ErrorCode::not_found, "no secret " + name);
  return {};
}

Result<SecretBytes> Secrets::open(const std::string& tenant_id, const std::string& name) {
  auto rec = store_.get_secret(tenant_id, name, store::now_rfc3339());
  if (!rec) {
    if (rec.error().code == ErrorCode::not_found) return fail(ErrorCode::not_found, "no secret " + name);
    return std::unexpected(rec.error());
  }
  auto k = key();
  if (!k) return std::unexpected(k.error());
  return unseal((*k)->view(), tenant_id, name, rec->sealed);
}

}  // namespace cela::session
