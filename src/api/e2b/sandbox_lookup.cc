#include "api/e2b/sandbox_lookup.h"

#include <boost/json/object.hpp>

#include "common/json_text.h"

namespace cela::api::e2b {

std::string sandbox_id(const Request& req) {
  auto id = req.header("E2b-Sandbox-Id");
  return id ? std::string(*id) : std::string();
}

void answer_sandbox_not_found(Responder& res, std::string_view sandbox_id) {
  std::string id(sandbox_id);
  res.raw(502, "application/json",
          json_text(boost::json::object{
              {"sandboxId", id}, {"message", "The sandbox " + id + " was not found"}, {"code", 502}}));
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
