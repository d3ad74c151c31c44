#include "common/error.h"

#include <cstring>

namespace cela {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::not_found: return "not_found";
    case ErrorCode::permission_denied: return "permission_denied";
    case ErrorCode::system: return "system";
    case ErrorCode::limit: return "limit";
    case ErrorCode::conflict: return "conflict";
    case ErrorCode::gone: return "gone";
    case ErrorCode::quota_exceeded: return "quota_exceeded";
    case ErrorCode::capacity_exceeded: return "capacity_exceeded";
    case ErrorCode::policy_denied: return "policy_denied";
    case ErrorCode::internal: return "internal";
  }
  return "internal";
}

std::string Error::message() const {
  if (err == 0) return context;
  return context + ": " + std::strerror(err);
}

}  // namespace cela
