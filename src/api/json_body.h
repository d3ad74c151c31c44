// Request bodies: the strict reader of common/json_fields.h. Its errors are
// ErrorCode::invalid_argument, which Responder::error(const Error&) and from_error()
// answer as invalid_request (400) with the field named.
#pragma once

#include "common/json_fields.h"

namespace cela::api {

using cela::JsonFields;
using cela::parse_json_object;

}  // namespace cela::api
