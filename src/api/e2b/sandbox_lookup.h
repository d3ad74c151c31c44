// Which sandbox a data-plane request is for, and E2B's answer when there is none.
//
// E2B's edge answers a request for a sandbox that does not exist (or no longer runs)
// with 502 {"sandboxId", "message": "... not found", "code": 502}; the SDK turns that
// into its "sandbox not found / timed out" errors. Every data-plane route (envd's RPCs,
// /files, /health, the code interpreter) checks through here before doing anything.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "api/e2b/e2b.h"
#include "api/responder.h"

namespace cela::api::e2b {

// The E2b-Sandbox-Id header: the session id (the authenticator has already bound the
// request's token to it).
std::string sandbox_id(const Request& req);

// The 502 answer for an unknown or ended sandbox.
void answer_sandbox_not_found(Responder& res, std::string_view sandbox_id);

// Runs `then` once the request's sandbox is live for its caller, on the session
// reactor (it must not block: call the session layer's asynchronous methods or post
// to the blocking pool). Otherwise answers the 502 itself, or the lookup's error.
void with_live_sandbox(E2bContext& ctx, Responder& res, std::function<void()> then);

}  // namespace cela::api::e2b
