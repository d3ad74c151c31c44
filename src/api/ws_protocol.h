// The JSON messages of GET /v1/sessions/{id}/ws (API.md "WebSocket"): what a client may
// send, parsed and validated, and the messages the server sends. Pure functions, no
// I/O (routes_ws.cc speaks them over the socket).
//
// Client: exec (the body of POST …/execs, parsed by parse_exec, plus `ref`), stdin
// (base64 data), close_stdin, kill (the body of POST …/kill), resize, attach (an exec
// id and the "<stdout>,<stderr>" offset of the SSE output stream). Unknown types and
// fields are invalid_request, answered as an `error` message naming the ref or exec the
// message carried, so the client can tell which of its requests failed.
#pragma once

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "api/http_error.h"
#include "session/config.h"
#include "session/output.h"
#include "session/types.h"

namespace cela::api::ws {

struct Exec {
  std::string ref;  // the client's name for it, echoed in `started` and errors ("" = none)
  session::ExecSpec spec;
};
struct Stdin {
  std::string exec;
  std::string data;  // decoded
};
struct CloseStdin {
  std::string exec;
};
struct Kill {
  std::string exec;
  session::KillSpec spec;
};
struct Resize {
  std::string exec;
  std::uint16_t cols = 0, rows = 0;
};
struct Attach {
  std::string exec;
  std::uint64_t stdout_from = 0, stderr_from = 0;
};
using ClientMessage = std::variant<Exec, Stdin, CloseStdin, Kill, Resize, Attach>;

// Why a message was refused, with the ids it carried (when they could be read).
struct Refusal {
  std::string ref;
  std::string exec;
  ApiError error;
};

std::expected<ClientMessage, Refusal> parse_client_message(std::string_view text,
                                                           const session::DaemonConfig& config);

// "<stdout offset>,<stderr offset>" (two whole numbers), as SSE ids and `offset`s are.
ApiResult<std::pair<std::uint64_t, std::uint64_t>> parse_position(std::string_view text, std::string_view what);
std::string position(std::uint64_t stdout_offset, std::uint64_t stderr_offset);

// ---- server messages (JSON text)
std::string started_message(std::string_view ref, const session::ExecRecord& record);
// `data` raw (sent base64); `offset` the position after it.
std::string output_message(session::Stream stream, std::string_view exec, std::string_view data,
                           std::string_view offset);
std::string exit_message(const session::ExecRecord& record);
// `error` as REST renders it ({"code", "message", …}, with the upgrade's request id);
// ref / exec when known.
std::string error_message(std::string_view ref, std::string_view exec, const ApiError& error,
                          std::string_view request_id);

}  // namespace cela::api::ws
