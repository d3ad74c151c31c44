#include "net/tls_hello.h"

#include <cstdint>
#include <utility>

namespace cela::net {
namespace {

using State = ClientHelloScan::State;

constexpr uint8_t kHandshakeRecord = 22;
constexpr uint8_t kClientHello = 1;
constexpr uint16_t kServerNameExtension = 0;
constexpr uint8_t kHostName = 0;
constexpr size_t kMaxRecordPayload = 16384 + 2048;  // TLSCiphertext's bound (RFC 8446 5.2)

// Reads big-endian fields from a byte range; any read past its end fails the reader.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  bool ok() const { return ok_; }
  size_t left() const { return data_.size() - pos_; }
  uint32_t number(size_t bytes) {
    if (!take(bytes)) return 0;
    uint32_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v = (v << 8) | static_cast<uint8_t>(data_[pos_ - bytes + i]);
    return v;
  }
  std::string_view bytes(size_t n) {
    if (!take(n)) return {};
    return data_.substr(pos_ - n, n);
  }
  // A field preceded by its length in `len_bytes` bytes.
  Reader vector(size_t len_bytes) {
    size_t n = number(len_bytes);
    return Reader(bytes(n), ok_);
  }

 private:
  Reader(std::string_view data, bool ok) : data_(data), ok_(ok) {}
  bool take(size_t n) {
    if (!ok_ || left() < n) return ok_ = false;
    pos_ += n;
    return true;
  }
  std::string_view data_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// The host_name of a whole ClientHello body (after its 4-byte handshake header).
ClientHelloScan parse_hello(std::string_view body) {
  Reader r(body);
  r.number(2);   // legacy_version
  r.bytes(32);   // random
  r.vector(1);   // legacy_session_id
  r.vector(2);   // cipher_suites
  r.vector(1);   // legacy_compression_methods
  if (!r.ok()) return {State::malformed, {}};
  if (r.left() == 0) return {State::done, {}};  // no extensions at all
  Reader extensions = r.vector(2);
  if (!r.ok()) return {State::malformed, {}};
  ClientHelloScan out{State::done, {}};
  bool seen = false;
  while (extensions.left() > 0) {
    uint32_t type = extensions.number(2);
    Reader ext = extensions.vector(2);
    if (!extensions.ok()) return {State::malformed, {}};
    if (type != kServerNameExtension) continue;
    if (std::exchange(seen, true)) return {State::malformed, {}};  // one server_name extension at most
    // The name list (RFC 6066 3): at most one host_name.
    Reader names = ext.vector(2);
    while (names.ok() && names.left() > 0) {
      uint32_t name_type = names.number(1);
      size_t len = names.number(2);
      std::string_view name = names.bytes(len);
      if (!names.ok() || name.empty()) return {State::malformed, {}};
      if (name_type != kHostName) continue;
      if (out.server_name) return {State::malformed, {}};
      out.server_name = std::string(name);
    }
    if (!names.ok()) return {State::malformed, {}};
  }
  return out;
}

}  // namespace

ClientHelloScan scan_client_hello(std::string_view bytes) {
  if (bytes.empty()) return {State::need_more, {}};
  if (static_cast<uint8_t>(bytes[0]) != kHandshakeRecord) return {State::not_tls, {}};
  // The handshake stream: the payloads of the leading handshake records, in order.
  std::string handshake;
  size_t pos = 0;
  for (;;) {
    if (handshake.size() >= 4) {
      if (static_cast<uint8_t>(handshake[0]) != kClientHello) return {State::malformed, {}};
      size_t length = (static_cast<size_t>(static_cast<uint8_t>(handshake[1])) << 16) |
                      (static_cast<size_t>(static_cast<uint8_t>(handshake[2])) << 8) |
                      static_cast<uint8_t>(handshake[3]);
      if (length + 4 > kMaxClientHelloBytes) return {State::malformed, {}};
      if (handshake.size() >= length + 4) return parse_hello(std::string_view(handshake).substr(4, length));
    }
    if (pos >= kMaxClientHelloBytes) return {State::malformed, {}};
    if (bytes.size() - pos < 5) return {State::need_more, {}};
    if (static_cast<uint8_t>(bytes[pos]) != kHandshakeRecord) return {State::malformed, {}};
    size_t record = (static_cast<size_t>(static_cast<uint8_t>(bytes[pos + 3])) << 8) | static_cast<uint8_t>(bytes[pos + 4]);
    if (record == 0 || record > kMaxRecordPayload) return {State::malformed, {}};
    if (bytes.size() - pos - 5 < record) return {State::need_more, {}};
    handshake.append(bytes.substr(pos + 5, record));
    pos += 5 + record;
  }
}

}  // namespace cela::net
