// Sessions and execs (API.md "Sessions", "Execs"). Handlers parse on the io thread and
// call the session layer's asynchronous methods: nothing here holds a thread while a
// session works (a /run of ten minutes costs a pending completion, not a thread).
// Store reads (GET, list, finished output) go to the blocking pool.
#include <boost/json.hpp>
#include <charconv>
#include <mutex>

#include "api/json_body.h"
#include "api/render.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"
#include "api/session_specs.h"
#include "api/ws_protocol.h"
#include "common/encoding.h"
#include "common/json_text.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

// "<stdout offset>,<stderr offset>": the SSE event id, a position in both streams
// (the same as the WebSocket's offsets, api/ws_protocol.h).
using ws::position;

// Bridges an exec's output to one SSE response. Called on the session reactor.
class SseSink final : public session::OutputSink {
 public:
  SseSink(std::shared_ptr<SseStream> sse, uint64_t out, uint64_t err) : sse_(std::move(sse)), out_(out), err_(err) {}
  void on_output(session::Stream stream, uint64_t offset, std::string_view data) override {
    std::lock_guard lock(mu_);
    (stream == session::Stream::stdout_stream ? out_ : err_) = offset;
    sse_->send(runtime::to_string(stream), position(out_, err_), base64_encode(data));
  }
  void on_exit(const session::ExecRecord& record) override {
    std::lock_guard lock(mu_);
    sse_->send("exit", position(out_, err_), json_text(render(record)));
    sse_->close();
  }
  bool closed() const override { return sse_->closed(); }
  void when_drained(size_t max_queued, std::function<void()> resume) override {
    sse_->on_drained(max_queued, std::move(resume));
  }

 private:
  std::mutex mu_;
  std::shared_ptr<SseStream> sse_;
  uint64_t out_, err_;
};

Result<json::object> body_object(const Request& req) {
  if (req.body.empty()) return json::object{};
  return parse_json_object(req.body);
}

// Completion -> answer, with the ids the error concerns.
template <class T, class Render>
session::Done<T> answer(Responder& res, int status, Render render_fn, std::string session_id = {},
                        std::string exec_id = {}) {
  return [r = res.shared_from_this(), status, render_fn, session_id, exec_id](Result<T> result) {
    if (!result) {
      ApiError e = from_error(result.error());
      if (!session_id.empty()) e = e.with_session(session_id);
      if (!exec_id.empty()) e = e.with_exec(exec_id);
      return r->error(e);
    }
    r->json(status, render_fn(*result));
  };
}

json::value render_session(const session::SessionRecord& r) { return render(r); }
json::value render_exec(const session::ExecRecord& r) { return render(r); }
json::value render_deleted(const session::SessionRecord& r) {
  json::object out = render(r);
  if (!r.cleanup) out["cleanup"] = json::object{};  // ended before it held anything
  return out;
}

json::object output_json(const session::ExecOutput& out) {
  json::object o;
  if (valid_utf8(out.stdout_data) && valid_utf8(out.stderr_data)) {
    o = {{"stdout", out.stdout_data}, {"stderr", out.stderr_data}};
  } else {
    o = {{"stdout", base64_encode(out.stdout_data)}, {"stderr", base64_encode(out.stderr_data)}, {"encoding", "base64"}};
  }
  o["output_truncated"] = out.truncated;
  return o;
}

}  // namespace

namespace {
// `?limit=` (1..1000) and `?cursor=` of a listing.
std::expected<session::PageRequest, ApiError> page_of(Request& req) {
  session::PageRequest page;
  if (auto l = req.query_value("limit")) {
    auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), page.limit);
    if (ec != std::errc() || p != l->data() + l->size() || page.limit < 1 || page.limit > 1000)
      return std::unexpected(ApiError::invalid_request("query `limit` must be 1..1000"));
  }
  if (auto c = req.query_value("cursor")) page.cursor = std::string(*c);
  return page;
}
}  // namespace

void add_session_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  auto& mgr = ctx.sessions;

  r.add(verb::post, "/v1/sessions", docs::create_session, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    auto spec = parse_create_session(*body, *mgr.config());
    if (!spec) return res.error(spec.error());
    int64_t wait_s = 0;
    if (auto w = req.query_value("wait_s")) {
      auto [p, ec] = std::from_chars(w->data(), w->data() + w->size(), wait_s);
      if (ec != std::errc() || p != w->data() + w->size() || wait_s < 0 || wait_s > 300)
        return res.error(ApiError::invalid_request("query `wait_s` must be a whole number of seconds, 0..300"));
    }
    mgr.create(caller_of(req), std::move(*spec), std::chrono::seconds(wait_s),
               answer<session::SessionRecord>(res, 201, render_session));
  });

  r.add(verb::get, "/v1/sessions", docs::list_sessions, [&](Request& req, Responder& res) {
    session::SessionFilter filter;
    if (auto s = req.query_value("state")) filter.state = std::string(*s);
    for (auto& [k, v] : req.query)
      if (k.starts_with("metadata.")) filter.metadata[k.substr(9)] = v;
    auto paged = page_of(req);
    if (!paged) return res.error(paged.error());
    session::PageRequest page = *paged;
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), filter, page]() -> ApiResult<json::value> {
      auto p = mgr.list(caller, filter, page);
      if (!p) return std::unexpected(from_error(p.error()));
      json::array items;
      for (auto& rec : p->records) items.push_back(render(rec));
      json::object out{{"sessions", std::move(items)}};
      out["next_cursor"] = p->next_cursor.empty() ? json::value(nullptr) : json::value(p->next_cursor);
      return out;
    });
  });

  r.add(verb::get, "/v1/sessions/{id}", docs::get_session, [&](Request& req, Responder& res) {
    answer_blocking(ctx, res, 200,
                    [&mgr, caller = caller_of(req), id = std::string(req.param("id"))]() -> ApiResult<json::value> {
                      auto rec = mgr.get(caller, id);
                      if (!rec) return std::unexpected(from_error(rec.error()).with_session(id));
                      return render(*rec);
                    });
  });

  r.add(verb::get, "/v1/sessions/{id}/packages", docs::session_packages, [&](Request& req, Responder& res) {
    auto page = page_of(req);
    if (!page) return res.error(page.error());
    answer_blocking(ctx, res, 200,
                    [&mgr, caller = caller_of(req), id = std::string(req.param("id")), page = *page]() -> ApiResult<json::value> {
                      auto p = mgr.package_installs(caller, id, page);
                      if (!p) return std::unexpected(from_error(p.error()).with_session(id));
                      json::array items;
                      for (auto& rec : p->records) items.push_back(render(rec));
                      json::object out{{"installs", std::move(items)}};
                      out["next_cursor"] = p->next_cursor.empty() ? json::value(nullptr) : json::value(p->next_cursor);
                      return out;
                    });
  });

  r.add(verb::patch, "/v1/sessions/{id}", docs::patch_session, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    auto spec = parse_patch(*body);
    if (!spec) return res.error(spec.error());
    std::string id(req.param("id"));
    mgr.patch(caller_of(req), id, *spec, answer<session::SessionRecord>(res, 200, render_session, id));
  });

  r.add(verb::delete_, "/v1/sessions/{id}", docs::delete_session, [&](Request& req, Responder& res) {
    std::string id(req.param("id"));
    mgr.remove(caller_of(req), id, answer<session::SessionRecord>(res, 200, render_deleted, id));
  });

  r.add(verb::post, "/v1/sessions/{id}/pause", docs::pause_session, [&](Request& req, Responder& res) {
    std::string id(req.param("id"));
    mgr.pause(caller_of(req), id, answer<session::SessionRecord>(res, 200, render_session, id));
  });

  r.add(verb::post, "/v1/sessions/{id}/resume", docs::resume_session, [&](Request& req, Responder& res) {
    std::string id(req.param("id"));
    mgr.resume(caller_of(req), id, answer<session::SessionRecord>(res, 200, render_session, id));
  });

  r.add(verb::post, "/v1/sessions/{id}/execs", docs::start_exec, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    auto spec = parse_exec(*body, *mgr.config());
    if (!spec) return res.error(spec.error());
    std::string id(req.param("id"));
    mgr.start_exec(caller_of(req), id, std::move(*spec),
                   answer<session::ExecRecord>(
                       res, 202,
                       [](const session::ExecRecord& e) -> json::value {
                         return json::object{{"id", e.id}, {"state", e.state}};
                       },
                       id));
  });

  r.add(verb::post, "/v1/sessions/{id}/run", docs::run_exec, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    auto spec = parse_exec(*body, *mgr.config());
    if (!spec) return res.error(spec.error());
    std::string id(req.param("id"));
    session::Caller caller = caller_of(req);
    // The wait holds no thread. A small output comes with the completion; a large
    // one is read from its files on the blocking pool.
    mgr.run(caller, id, std::move(*spec),
            [&ctx, &mgr, responder = res.shared_from_this(), caller, id](Result<session::RunOutcome> done) {
              if (!done) return responder->error(from_error(done.error()).with_session(id));
              auto answer = [responder](const session::ExecRecord& rec, const std::optional<session::ExecOutput>& out) {
                json::object o = render(rec);
                if (out)
                  for (auto& kv : output_json(*out)) o[kv.key()] = kv.value();
                responder->json(200, o);
              };
              if (done->output) return answer(done->record, done->output);
              ctx.server.post_blocking([&mgr, answer, caller, id, rec = std::move(done->record)] {
                auto out = mgr.exec_output(caller, id, rec.id);
                answer(rec, out ? std::optional<session::ExecOutput>(std::move(*out)) : std::nullopt);
              });
            });
  });

  r.add(verb::get, "/v1/sessions/{id}/execs/{eid}", docs::get_exec, [&](Request& req, Responder& res) {
    std::string id(req.param("id")), eid(req.param("eid"));
    mgr.get_exec(caller_of(req), id, eid, answer<session::ExecRecord>(res, 200, render_exec, id, eid));
  });

  r.add(verb::get, "/v1/sessions/{id}/execs/{eid}/output", docs::exec_output, [&](Request& req, Responder& res) {
    auto follow = req.query_flag("follow");
    if (!follow) return res.error(follow.error());
    std::string id(req.param("id")), eid(req.param("eid"));
    session::Caller caller = caller_of(req);
    if (!*follow) {
      return answer_blocking(ctx, res, 200, [&mgr, caller, id, eid]() -> ApiResult<json::value> {
        auto out = mgr.exec_output(caller, id, eid);
        if (!out) return std::unexpected(from_error(out.error()).with_session(id).with_exec(eid));
        return output_json(*out);
      });
    }
    std::pair<uint64_t, uint64_t> from{0, 0};
    if (auto last = last_event_id(req)) {
      auto pos = ws::parse_position(*last, "Last-Event-ID");
      if (!pos) return res.error(pos.error());
      from = *pos;
    }
    // The stream starts only once the exec is known to exist (else a JSON error).
    auto responder = res.shared_from_this();
    struct LazySink final : session::OutputSink {
      std::shared_ptr<Responder> responder;
      uint64_t out, err;
      std::shared_ptr<SseSink> sink;
      SseSink& get() {
        if (!sink) sink = std::make_shared<SseSink>(responder->start_sse(), out, err);
        return *sink;
      }
      void on_output(session::Stream s, uint64_t offset, std::string_view data) override {
        get().on_output(s, offset, data);
      }
      void on_exit(const session::ExecRecord& record) override { get().on_exit(record); }
      bool closed() const override { return sink ? sink->closed() : responder->client_gone(); }
      void when_drained(size_t max_queued, std::function<void()> resume) override {
        get().when_drained(max_queued, std::move(resume));
      }
    };
    auto lazy = std::make_shared<LazySink>();
    lazy->responder = responder;
    lazy->out = from.first;
    lazy->err = from.second;
    mgr.follow_exec(caller, id, eid, from.first, from.second, lazy, [lazy, id, eid](Result<void> found) {
      if (!found) return lazy->responder->error(from_error(found.error()).with_session(id).with_exec(eid));
      lazy->get();  // commit to the event stream now
    });
  });

  r.add(verb::post, "/v1/sessions/{id}/execs/{eid}/stdin", docs::write_stdin,
        [&](Request& req, Responder& res) {
          auto close = req.query_flag("close");
          if (!close) return res.error(close.error());
          std::string id(req.param("id")), eid(req.param("eid"));
          mgr.write_stdin(caller_of(req), id, eid, std::move(req.body), *close,
                          [r = res.shared_from_this(), id, eid](Result<void> done) {
                            if (!done) return r->error(from_error(done.error()).with_session(id).with_exec(eid));
                            r->no_content();
                          });
        },
        upload_options(ctx));

  r.add(verb::post, "/v1/sessions/{id}/execs/{eid}/resize", docs::resize_exec, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    auto size = parse_resize(*body);
    if (!size) return res.error(size.error());
    std::string id(req.param("id")), eid(req.param("eid"));
    mgr.resize_exec(caller_of(req), id, eid, size->first, size->second,
                    [r = res.shared_from_this(), id, eid](Result<void> done) {
                      if (!done) return r->error(from_error(done.error()).with_session(id).with_exec(eid));
                      r->no_content();
                    });
  });

  r.add(verb::post, "/v1/sessions/{id}/execs/{eid}/kill", docs::kill_exec, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    auto spec = parse_kill(*body);
    if (!spec) return res.error(spec.error());
    std::string id(req.param("id")), eid(req.param("eid"));
    int sig = spec->signal;
    mgr.kill_exec(caller_of(req), id, eid, *spec,
                  answer<session::ExecRecord>(
                      res, 202,
                      [sig](const session::ExecRecord& e) -> json::value {
                        json::object o{{"id", e.id}, {"state", e.state}};
                        if (e.state == "running") o["signal"] = sig;
                        return o;
                      },
                      id, eid));
  });
}

}  // namespace cela::api
