// Error and Result: how every fallible function in cela reports failure.
//
// An Error carries a stable code (what kind of failure, for mapping to exit codes and,
// later, to API errors), the errno when a syscall failed, and a context string naming
// the step and its object ("mount overlay on /newroot"). Functions return
// Result<T> = std::expected<T, Error>; nothing logs-and-returns-false.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <string_view>

namespace cela {

enum class ErrorCode {
  invalid_argument,   // the caller asked for something malformed
  not_found,          // a named thing (template, file, cgroup) does not exist
  permission_denied,  // the caller lacks the privilege (e.g. not root)
  system,             // a syscall failed; errno says which way
  limit,              // a size or count limit refused the operation (too large)
  conflict,           // the object is in the wrong state for the operation
  gone,               // the object existed and has ended (a terminated session)
  quota_exceeded,     // a tenant quota refused the operation
  capacity_exceeded,  // the host is at capacity; retry later
  policy_denied,      // configured policy refused the operation
  internal,           // a broken invariant inside cela
};

std::string_view to_string(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::internal;
  int err = 0;          // errno, 0 when not from a syscall
  std::string context;  // "step: object"

  // "context: strerror(err)" or just the context.
  std::string message() const;
};

template <class T>
using Result = std::expected<T, Error>;

// For `return fail(...)` in functions returning Result<T>.
inline std::unexpected<Error> fail(ErrorCode code, std::string context, int err = 0) {
  return std::unexpected(Error{code, err, std::move(context)});
}

// A failed syscall: captures errno at the call site.
inline std::unexpected<Error> sys_fail(std::string context, int err = errno) {
  return std::unexpected(Error{ErrorCode::system, err, std::move(context)});
}

}  // namespace cela
