// The server name a TLS client asks for, read from its first bytes (the ClientHello's
// server_name extension, RFC 6066), so the egress proxy can hold a CONNECT tunnel to the
// host it was opened for. Pure parsing: no I/O, any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cela::net {

struct ClientHelloScan {
  enum class State {
    need_more,  // a TLS handshake so far: read more bytes and scan again
    not_tls,    // the first byte is not a TLS handshake record: some other protocol
    malformed,  // claims to be a ClientHello but does not parse (or is over the bound)
    done,       // a whole ClientHello: `server_name` is its host_name, if it has one
  } state = State::need_more;
  std::optional<std::string> server_name;
};

// The most a ClientHello may take, records included; past it the scan is malformed.
inline constexpr size_t kMaxClientHelloBytes = 64 * 1024;

// Scans the bytes a client sent first. A hello split over several records is put back
// together; bytes after it are ignored.
ClientHelloScan scan_client_hello(std::string_view bytes);

}  // namespace cela::net
