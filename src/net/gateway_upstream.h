// The package gateway's upstream client: HTTPS GETs from the daemon to the operator's
// registries (Boost.Beast over OpenSSL), trusting the system CA store plus the
// operator's `packages.ca_file`, with SNI and host name (or IP) verification. Bodies go
// to a file, hashed (sha256, and sha512/sha1 for npm's integrity fields) as they
// arrive, and are cut off at a size cap. Redirects are followed (5 at most, https
// only). Synchronous: the gateway calls it on its own worker threads, never on the
// proxy's I/O thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "common/error.h"

namespace cela::net {

struct Url {
  std::string scheme, host, port, target;  // target: path and query, "/" at least
  std::string origin() const;              // "https://host[:port]"
};
Result<Url> parse_url(const std::string& text);
// `ref` (absolute, or relative to `base` as in a web page) as an absolute URL.
std::string resolve_url(const std::string& base, const std::string& ref);

struct Fetched {
  unsigned status = 0;
  std::string content_type;
  uint64_t size = 0;
  std::string sha256, sha512_base64, sha1_hex;
  std::string final_url;
};

class UpstreamClient {
 public:
  // ca_file: extra PEM CA certificates ("" = the system store only).
  static Result<std::unique_ptr<UpstreamClient>> open(const std::string& ca_file);
  ~UpstreamClient();

  // GET `url` into the new file `path`. A status other than 200 leaves the file empty
  // and is reported in Fetched::status (not an error); a body over max_bytes is limit.
  Result<Fetched> get(const std::string& url, const std::string& accept, const std::string& path, uint64_t max_bytes);

  std::chrono::seconds timeout{60};

 private:
  struct Tls;
  explicit UpstreamClient(std::unique_ptr<Tls> tls);
  std::unique_ptr<Tls> tls_;
};

}  // namespace cela::net
