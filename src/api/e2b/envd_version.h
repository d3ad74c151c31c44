// The envd version cela's data plane advertises (create and connect answer it as
// `envdVersion`). E2B's SDKs switch features on by this number, so it must be exactly
// the highest version whose features all exist here (docs/e2b.md):
//   0.1.4  recursive WatchDir        0.5.2  CloseStdin
//   0.3.0  stdin on Start            0.5.7  application/octet-stream uploads
//   0.4.0  default user `user`       0.6.2  file metadata in EntryInfo
//                                    0.6.3  entry info in filesystem events
#pragma once

#include <string_view>

namespace cela::api::e2b {

inline constexpr std::string_view kEnvdVersion = "0.6.3";

}  // namespace cela::api::e2b
