#include "api/e2b/sandbox_lookup.h"

namespace cela::api::e2b {

std::string sandbox_id(const Request& req) {
  auto id = req.header("E2b-Sandbox-Id");
  return id ? std::string(*id) : std::string();
}

void answer_sandbox_not_found(Responder& res, std::string_view sandbox_id) {
  // Always E2B's shape, whatever the route's style (a Connect route too): E2B's proxy
  // answers before envd is reached. render_error names the sandbox in a 502.
  std::string id(sandbox_id);
  ApiError e = ApiError::bad_gateway("The sandbox " + id + " was not found").with_session(id);
  RenderedError rendered = render_error(ErrorStyle::e2b, e, res.request().request_id);
  res.raw(rendered.status, "application/json", std::move(rendered.body));
}

void with_live_sandbox(E2bContext& ctx, Responder& res, std::function<void()> then) {
  std::string id = sandbox_id(res.request());
  ctx.api.sessions.check_live(caller_of(res.request()), id,
                              [r = res.shared_from_this(), id, then = std::move(then)](Result<void> live) {
                                if (live) return then();
                                if (live.error().code == ErrorCode::not_found || live.error().code == ErrorCode::gone)
                                  return answer_sandbox_not_found(*r, id);
                                r->error(live.error());
                              });
}

}  // namespace cela::api::e2b
