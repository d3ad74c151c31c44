// E2B's control plane (docs/e2b.md "Control plane"): /sandboxes and /v2/sandboxes on
// the main router, answered in E2B's error shape. control.cc registers the routes;
// control_wire.cc holds the translation both ways, kept free of I/O so it can be
// tested on its own:
//
//   NewSandbox body      -> the native create body (POST /v1/sessions), parsed by the
//                           native parser, then what only E2B asks for (typed fields of
//                           CreateSessionSpec: pause_at_ttl, no idle timeout)
//   SessionRecord        -> Sandbox (create, connect), SandboxDetail, ListedSandbox
//   SessionMetrics       -> [SandboxMetric]
//   ?metadata=           -> the native metadata filter
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "api/e2b/tokens.h"
#include "common/error.h"
#include "session/config.h"
#include "session/observe.h"
#include "session/types.h"

namespace cela::api::e2b {

// E2B's default sandbox timeout (seconds) when a create does not name one.
inline constexpr uint64_t kDefaultTimeoutS = 300;

// A NewSandbox / NewSandboxV2 body -> the native create spec, as POST /v1/sessions
// would make it from the translated body (same defaults, maxima, checks). Fields cela
// cannot honour (network rules and egress proxies, mcp, iam) are invalid_argument;
// `secure` and `autoPauseMemory` are accepted and change nothing; unknown fields are
// ignored (newer SDKs add some).
Result<session::CreateSessionSpec> parse_new_sandbox(const boost::json::object& body,
                                                     const session::DaemonConfig& config);
// The native create body parse_new_sandbox hands to the native parser (exposed for
// tests and docs/e2b.md's mapping table).
Result<boost::json::object> native_create_body(const boost::json::object& body,
                                               const session::DaemonConfig& config);

// `timeout` of a connect or timeout body: whole seconds, 1..maxima.ttl_s. Absent:
// nullopt (required: invalid_argument).
Result<std::optional<uint64_t>> parse_timeout(const boost::json::object& body, const session::DaemonConfig& config,
                                              bool required);

// "running" or "paused": E2B's state of a live session.
std::string_view sandbox_state(std::string_view session_state);
// The native states an E2B state filter (`running`, `paused`, comma separated or
// repeated) stands for; empty `states` means both. invalid_argument for another.
Result<std::vector<std::string>> session_states_of(const std::vector<std::string_view>& states);
// ?metadata=: a form-encoded "k=v&k2=v2" whose keys and values the SDK encoded once
// more. invalid_argument for a pair without '='.
Result<std::map<std::string, std::string>> parse_metadata_filter(std::string_view query_value);

// The control-plane routes (control.cc), on the main router.
struct E2bContext;
void add_control_routes(E2bContext& ctx);

// The Sandbox object of create and connect: ids, envd version and the sandbox's tokens.
boost::json::object render_sandbox(const store::SessionRecord& record, const SandboxTokens& tokens);
// ListedSandbox (GET /v2/sandboxes) and SandboxDetail (GET /sandboxes/{id}).
boost::json::object render_listed(const store::SessionRecord& record);
boost::json::object render_detail(const store::SessionRecord& record, const SandboxTokens& tokens);
// [SandboxMetric]: one per sample of the session's history, then one for now; CPU
// use between consecutive points, as a percentage of the session's CPUs.
boost::json::array render_metrics(const session::SessionMetrics& metrics, const store::SessionLimits& limits,
                                  int64_t now_ms);

}  // namespace cela::api::e2b
