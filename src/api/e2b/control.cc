// E2B's control plane on the main router (docs/e2b.md "Control plane"): each route is
// the session-layer call the matching native route makes, as the caller's tenant, with
// E2B's bodies (control_wire.cc) and error shape. Handlers run on io threads: store
// reads go to the blocking pool, session calls complete on the reactor.
#include <boost/json.hpp>
#include <charconv>
#include <memory>

#include "api/e2b/control.h"
#include "api/e2b/control_docs.h"
#include "api/e2b/e2b.h"
#include "api/json_body.h"
#include "api/responder.h"

namespace cela::api::e2b {
namespace json = boost::json;
using http::verb;

namespace {

RouteOptions e2b_options() { return RouteOptions().with_error_style(ErrorStyle::e2b); }

// A session error as E2B sees it: an ended sandbox is not found (E2B keeps no ended
// ones), as is another tenant's (the session layer answers not_found for it already).
ApiError sandbox_error(const Error& e, const std::string& id) {
  ApiError a = from_error(e);
  if (a.code == "gone" || a.code == "not_found") return ApiError::not_found("sandbox " + id + " not found");
  return a;
}

bool live(const store::SessionRecord& r) { return store::is_live_session_state(r.state); }

Result<json::object> body_of(const Request& req) {
  if (req.body.empty()) return json::object{};
  return parse_json_object(req.body);
}

// The live session `id` of the caller's tenant (blocking pool), else not found.
void with_live(RouteContext& api, const Request& req, const std::shared_ptr<Responder>& res, std::string id,
               std::function<void(store::SessionRecord)> then) {
  api.server.post_blocking([&api, caller = caller_of(req), res, id = std::move(id), then = std::move(then)] {
    auto rec = api.sessions.get(caller, id);
    if (!rec) return res->error(sandbox_error(rec.error(), id));
    if (!live(*rec)) return res->error(ApiError::not_found("sandbox " + id + " not found"));
    then(std::move(*rec));
  });
}

// POST /v2/sandboxes, /sandboxes.
void create(E2bContext& ctx, Request& req, Responder& res) {
  auto body = body_of(req);
  if (!body) return res.error(from_error(body.error()));
  auto spec = parse_new_sandbox(*body, *ctx.api.sessions.config());
  if (!spec) return res.error(from_error(spec.error()));
  ctx.api.sessions.create(caller_of(req), std::move(*spec), std::chrono::seconds(0),
                          [r = res.shared_from_this(), &tokens = ctx.tokens](Result<store::SessionRecord> done) {
                            if (!done) return r->error(from_error(done.error()));
                            r->json(201, render_sandbox(*done, tokens));
                          });
}

// The session's TTL from now, then `then` with the record (no timeout: the record as it is).
void set_ttl(RouteContext& api, const session::Caller& caller, const std::string& id, std::optional<uint64_t> ttl,
             const std::shared_ptr<Responder>& res, std::function<void(store::SessionRecord)> then) {
  session::PatchSpec patch;
  patch.ttl_s = ttl;
  api.sessions.patch(caller, id, patch, [res, id, then = std::move(then)](Result<store::SessionRecord> r) {
    if (!r) return res->error(sandbox_error(r.error(), id));
    then(std::move(*r));
  });
}

// POST /v2/sandboxes/{id}/connect, /sandboxes/{id}/connect and (older SDKs)
// /sandboxes/{id}/resume: 200 when it runs, 201 when it was resumed from pause; a
// timeout is the sandbox's life from now. `must_be_paused`: resume's 409 otherwise.
void connect(E2bContext& ctx, Request& req, Responder& res, bool timeout_required, bool must_be_paused) {
  auto body = body_of(req);
  if (!body) return res.error(from_error(body.error()));
  auto timeout = parse_timeout(*body, *ctx.api.sessions.config(), timeout_required);
  if (!timeout) return res.error(from_error(timeout.error()));
  std::string id(req.param("id"));
  auto r = res.shared_from_this();
  session::Caller caller = caller_of(req);
  with_live(ctx.api, req, r, id, [&ctx, caller, r, id, ttl = *timeout, must_be_paused](store::SessionRecord rec) {
    const bool paused = rec.state == store::session_state::paused;
    if (must_be_paused && !paused) return r->error(ApiError::conflict("sandbox " + id + " is not paused"));
    auto answer = [&ctx, r, status = paused ? 201 : 200](store::SessionRecord done) {
      r->json(status, render_sandbox(done, ctx.tokens));
    };
    auto then_ttl = [&ctx, caller, r, id, ttl, answer](store::SessionRecord done) {
      if (!ttl) return answer(std::move(done));
      set_ttl(ctx.api, caller, id, ttl, r, answer);
    };
    if (!paused) return then_ttl(std::move(rec));
    ctx.api.sessions.resume(caller, id, [r, id, then_ttl](Result<store::SessionRecord> resumed) {
      if (!resumed) return r->error(sandbox_error(resumed.error(), id));
      then_ttl(std::move(*resumed));
    });
  });
}

// GET /v2/sandboxes and /sandboxes: live sandboxes of the caller's tenant, newest first.
void list(E2bContext& ctx, Request& req, Responder& res) {
  // Filters cela's listing cannot apply are refused rather than ignored (a silently
  // unfiltered answer would be wrong); newest first is the only order.
  for (std::string_view unsupported : {"template", "startedAfter"})
    if (req.query_value(unsupported))
      return res.error(ApiError::invalid_request("query `" + std::string(unsupported) + "` is not supported by cela"));
  if (auto order = req.query_value("order"); order && *order != "desc")
    return res.error(ApiError::invalid_request("query `order`: cela lists newest first only (desc)"));
  session::SessionFilter filter;
  if (auto m = req.query_value("metadata")) {
    auto pairs = parse_metadata_filter(*m);
    if (!pairs) return res.error(from_error(pairs.error()));
    filter.metadata = std::move(*pairs);
  }
  auto states = session_states_of(req.query_values("state"));
  if (!states) return res.error(from_error(states.error()));
  filter.any_state = std::move(*states);
  session::PageRequest page;
  if (auto l = req.query_value("limit")) {
    auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), page.limit);
    if (ec != std::errc() || p != l->data() + l->size() || page.limit < 1 || page.limit > 1000)
      return res.error(ApiError::invalid_request("query `limit` must be 1..1000"));
  }
  if (auto t = req.query_value("nextToken")) page.cursor = std::string(*t);
  ctx.api.server.post_blocking([&ctx, caller = caller_of(req), r = res.shared_from_this(), filter, page] {
    auto p = ctx.api.sessions.list(caller, filter, page);
    if (!p) return r->error(from_error(p.error()));
    json::array out;
    for (const auto& rec : p->records) out.push_back(render_listed(rec));
    Headers headers;
    if (!p->next_cursor.empty()) headers.emplace_back("X-Next-Token", p->next_cursor);
    r->json(200, out, std::move(headers));
  });
}

}  // namespace

void add_control_routes(E2bContext& ctx) {
  Router& router = ctx.api.server.router();
  auto& mgr = ctx.api.sessions;

  for (const auto& [path, doc] : {std::pair{"/v2/sandboxes", &docs::create_sandbox_v2},
                                  std::pair{"/sandboxes", &docs::create_sandbox}})
    router.add(
        verb::post, path, *doc, [&ctx](Request& req, Responder& res) { create(ctx, req, res); }, e2b_options());

  for (const auto& [path, doc] : {std::pair{"/v2/sandboxes", &docs::list_sandboxes_v2},
                                  std::pair{"/sandboxes", &docs::list_sandboxes}})
    router.add(
        verb::get, path, *doc, [&ctx](Request& req, Responder& res) { list(ctx, req, res); }, e2b_options());

  router.add(
      verb::get, "/sandboxes/{id}", docs::get_sandbox,
      [&ctx](Request& req, Responder& res) {
        with_live(ctx.api, req, res.shared_from_this(), std::string(req.param("id")),
                  [&ctx, r = res.shared_from_this()](store::SessionRecord rec) {
                    r->json(200, render_detail(rec, ctx.tokens));
                  });
      },
      e2b_options());

  // Kill: 204, then 404 (the SDK's true, then false).
  router.add(
      verb::delete_, "/sandboxes/{id}", docs::kill_sandbox,
      [&ctx, &mgr](Request& req, Responder& res) {
        std::string id(req.param("id"));
        auto r = res.shared_from_this();
        with_live(ctx.api, req, r, id, [&mgr, caller = caller_of(req), r, id](store::SessionRecord) {
          mgr.remove(caller, id, [r, id](Result<store::SessionRecord> done) {
            if (!done) return r->error(sandbox_error(done.error(), id));
            r->no_content();
          });
        });
      },
      e2b_options());

  router.add(
      verb::post, "/sandboxes/{id}/timeout", docs::set_sandbox_timeout,
      [&ctx](Request& req, Responder& res) {
        auto body = body_of(req);
        if (!body) return res.error(from_error(body.error()));
        auto timeout = parse_timeout(*body, *ctx.api.sessions.config(), true);
        if (!timeout) return res.error(from_error(timeout.error()));
        auto r = res.shared_from_this();
        set_ttl(ctx.api, caller_of(req), std::string(req.param("id")), *timeout, r,
                [r](store::SessionRecord) { r->no_content(); });
      },
      e2b_options());

  // Pause: 204, 409 when already paused. A paused sandbox is kept for the server's
  // longest TTL (maxima.ttl_s) from the pause, as E2B keeps paused sandboxes.
  router.add(
      verb::post, "/sandboxes/{id}/pause", docs::pause_sandbox,
      [&ctx, &mgr](Request& req, Responder& res) {
        std::string id(req.param("id"));
        auto r = res.shared_from_this();
        session::Caller caller = caller_of(req);
        with_live(ctx.api, req, r, id, [&ctx, &mgr, caller, r, id](store::SessionRecord rec) {
          if (rec.state == store::session_state::paused)
            return r->error(ApiError::conflict("sandbox " + id + " is already paused"));
          mgr.pause(caller, id, [&ctx, caller, r, id](Result<store::SessionRecord> paused) {
            if (!paused) return r->error(sandbox_error(paused.error(), id));
            set_ttl(ctx.api, caller, id, ctx.api.sessions.config()->maxima.ttl_s, r,
                    [r](store::SessionRecord) { r->no_content(); });
          });
        });
      },
      e2b_options());

  router.add(
      verb::post, "/v2/sandboxes/{id}/connect", docs::connect_sandbox_v2,
      [&ctx](Request& req, Responder& res) { connect(ctx, req, res, false, false); }, e2b_options());
  router.add(
      verb::post, "/sandboxes/{id}/connect", docs::connect_sandbox,
      [&ctx](Request& req, Responder& res) { connect(ctx, req, res, false, false); }, e2b_options());
  router.add(
      verb::post, "/sandboxes/{id}/resume", docs::resume_sandbox,
      [&ctx](Request& req, Responder& res) { connect(ctx, req, res, false, true); }, e2b_options());

  router.add(
      verb::get, "/sandboxes/{id}/metrics", docs::sandbox_metrics,
      [&ctx, &mgr](Request& req, Responder& res) {
        std::optional<int64_t> range[2];
        const char* names[2] = {"start", "end"};
        for (int i = 0; i < 2; ++i) {
          auto v = req.query_value(names[i]);
          if (!v) continue;
          int64_t n = 0;
          auto [p, ec] = std::from_chars(v->data(), v->data() + v->size(), n);
          if (ec != std::errc() || p != v->data() + v->size())
            return res.error(ApiError::invalid_request("query `" + std::string(names[i]) + "` must be unix seconds"));
          range[i] = n;
        }
        std::string id(req.param("id"));
        auto r = res.shared_from_this();
        session::Caller caller = caller_of(req);
        with_live(ctx.api, req, r, id, [&mgr, caller, r, id, start = range[0], end = range[1]](store::SessionRecord rec) {
          mgr.metrics(caller, id, [r, id, start, end, limits = rec.limits](Result<session::SessionMetrics> m) {
            if (!m) return r->error(sandbox_error(m.error(), id));
            if (!m->live) return r->error(ApiError::not_found("sandbox " + id + " not found"));
            json::array out;
            for (auto& point : render_metrics(*m, limits, store::now_ms())) {
              int64_t at = point.as_object().at("timestampUnix").to_number<int64_t>();
              if ((start && at < *start) || (end && at > *end)) continue;
              out.push_back(std::move(point));
            }
            r->json(200, out);
          });
        });
      },
      e2b_options());
}

}  // namespace cela::api::e2b
