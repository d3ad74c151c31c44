// The one source of random identifiers and secrets: the OpenSSL CSPRNG (RAND_bytes).
// cela cannot issue ids or keys safely without entropy: if the CSPRNG fails, the
// process aborts rather than hand out a guessable value.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace cela {

// `n` random bytes.
std::string random_bytes(std::size_t n);
// prefix + "-" + 16 lowercase hex characters: "s-1f3a09c2b4d5e6f7" (sessions, execs,
// tenants, keys, requests).
std::string random_id(std::string_view prefix);

}  // namespace cela
