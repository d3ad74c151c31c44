// Sessions and execs (API.md "Sessions", "Execs").
#include <signal.h>

#include <boost/beast/core/detail/base64.hpp>
#include <boost/json.hpp>
#include <charconv>
#include <mutex>

#include "api/json_body.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

std::string base64(std::string_view data) {
  namespace b64 = boost::beast::detail::base64;
  std::string out(b64::encoded_size(data.size()), '\0');
  out.resize(b64::encode(out.data(), data.data(), data.size()));
  return out;
}

// Structural UTF-8 check (lead and continuation bytes): decides text vs base64.
bool valid_utf8(std::string_view s) {
  size_t i = 0, n = s.size();
  while (i < n) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || i + len > n) return false;
    for (size_t k = 1; k < len; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += len;
  }
  return true;
}

// "<stdout offset>,<stderr offset>": the SSE event id, a position in both streams.
std::pair<uint64_t, uint64_t> parse_position(std::string_view id) {
  uint64_t out = 0, err = 0;
  auto comma = id.find(',');
  std::string_view a = id.substr(0, comma), b = comma == std::string_view::npos ? "" : id.substr(comma + 1);
  std::from_chars(a.data(), a.data() + a.size(), out);
  std::from_chars(b.data(), b.data() + b.size(), err);
  return {out, err};
}

// Bridges an exec's output to one SSE response.
class SseSubscriber final : public session::OutputSubscriber {
 public:
  SseSubscriber(std::shared_ptr<SseStream> sse, uint64_t out, uint64_t err) : sse_(std::move(sse)), out_(out), err_(err) {}
  void on_output(std::string_view stream, uint64_t offset, std::string_view data) override {
    std::lock_guard lock(mu_);
    (stream == "stdout" ? out_ : err_) = offset;
    sse_->send(stream, std::to_string(out_) + "," + std::to_string(err_), base64(data));
  }
  void on_exit(const json::object& record) override {
    std::lock_guard lock(mu_);
    sse_->send("exit", std::to_string(out_) + "," + std::to_string(err_), json::serialize(record));
    sse_->close();
  }
  bool closed() const override { return sse_->closed(); }

 private:
  std::mutex mu_;
  std::shared_ptr<SseStream> sse_;
  uint64_t out_, err_;
};

ApiResult<json::object> body_object(const Request& req) {
  if (req.body.empty()) return json::object{};
  return parse_json_object(req.body);
}

template <class T>
ApiResult<json::value> lift(Result<T> r, const std::string& session_id = {}, const std::string& exec_id = {}) {
  if (!r) {
    ApiError e = from_error(r.error());
    if (!session_id.empty()) e = e.with_session(session_id);
    if (!exec_id.empty()) e = e.with_exec(exec_id);
    return std::unexpected(e);
  }
  return json::value(std::move(*r));
}

}  // namespace

void add_session_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  auto& mgr = ctx.sessions;

  r.add(verb::post, "/v1/sessions", docs::create_session, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    int64_t wait_s = 0;
    if (auto w = req.query_value("wait_s")) {
      auto [p, ec] = std::from_chars(w->data(), w->data() + w->size(), wait_s);
      if (ec != std::errc() || p != w->data() + w->size() || wait_s < 0 || wait_s > 300)
        return res.error(ApiError::invalid_request("query `wait_s` must be a whole number of seconds, 0..300"));
    }
    answer_blocking(ctx, res, 201, [&mgr, caller = caller_of(req), body = std::move(*body), wait_s] {
      return lift(mgr.create(caller, body, std::chrono::seconds(wait_s)));
    });
  });

  r.add(verb::get, "/v1/sessions", docs::list_sessions, [&](Request& req, Responder& res) {
    store::SessionFilter filter;
    if (auto s = req.query_value("state")) filter.state = std::string(*s);
    for (auto& [k, v] : req.query)
      if (k.starts_with("metadata.")) filter.metadata[k.substr(9)] = v;
    store::PageRequest page;
    if (auto l = req.query_value("limit")) {
      auto [p, ec] = std::from_chars(l->data(), l->data() + l->size(), page.limit);
      if (ec != std::errc() || page.limit < 1 || page.limit > 1000)
        return res.error(ApiError::invalid_request("query `limit` must be 1..1000"));
    }
    if (auto c = req.query_value("cursor")) page.cursor = std::string(*c);
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), filter, page] {
      return lift(mgr.list(caller, filter, page));
    });
  });

  r.add(verb::get, "/v1/sessions/{id}", docs::get_session, [&](Request& req, Responder& res) {
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), id = std::string(req.param("id"))] {
      return lift(mgr.get(caller, id), id);
    });
  });

  r.add(verb::patch, "/v1/sessions/{id}", docs::patch_session, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), id = std::string(req.param("id")), b = *body] {
      return lift(mgr.patch(caller, id, b), id);
    });
  });

  r.add(verb::delete_, "/v1/sessions/{id}", docs::delete_session, [&](Request& req, Responder& res) {
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), id = std::string(req.param("id"))] {
      return lift(mgr.remove(caller, id), id);
    });
  });

  r.add(verb::post, "/v1/sessions/{id}/execs", docs::start_exec, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    answer_blocking(ctx, res, 202, [&mgr, caller = caller_of(req), id = std::string(req.param("id")), b = *body] {
      return lift(mgr.start_exec(caller, id, b), id);
    });
  });

  r.add(verb::post, "/v1/sessions/{id}/run", docs::run_exec, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), id = std::string(req.param("id")), b = *body] {
      auto rec = mgr.run(caller, id, b);
      if (rec) {
        // Output as UTF-8 when it is, else base64 (API.md).
        bool text = valid_utf8(json::value_to<std::string>(rec->at("stdout"))) &&
                    valid_utf8(json::value_to<std::string>(rec->at("stderr")));
        if (!text) {
          (*rec)["stdout"] = base64(json::value_to<std::string>(rec->at("stdout")));
          (*rec)["stderr"] = base64(json::value_to<std::string>(rec->at("stderr")));
          (*rec)["encoding"] = "base64";
        }
      }
      return lift(std::move(rec), id);
    });
  });

  r.add(verb::get, "/v1/sessions/{id}/execs/{eid}", docs::get_exec, [&](Request& req, Responder& res) {
    answer_blocking(ctx, res, 200,
                    [&mgr, caller = caller_of(req), id = std::string(req.param("id")), eid = std::string(req.param("eid"))] {
                      return lift(mgr.get_exec(caller, id, eid), id, eid);
                    });
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
        json::object o;
        if (valid_utf8(out->stdout_data) && valid_utf8(out->stderr_data)) {
          o = {{"stdout", out->stdout_data}, {"stderr", out->stderr_data}};
        } else {
          o = {{"stdout", base64(out->stdout_data)}, {"stderr", base64(out->stderr_data)}, {"encoding", "base64"}};
        }
        o["output_truncated"] = out->truncated;
        return o;
      });
    }
    auto [from_out, from_err] = parse_position(last_event_id(req).value_or(""));
    ctx.server.post_blocking([&mgr, responder = res.shared_from_this(), caller, id, eid, from_out, from_err] {
      // Check the exec exists before committing to an event stream.
      if (auto rec = mgr.get_exec(caller, id, eid); !rec)
        return responder->error(from_error(rec.error()).with_session(id).with_exec(eid));
      auto sse = responder->start_sse();
      if (!sse) return;
      auto sub = std::make_shared<SseSubscriber>(sse, from_out, from_err);
      if (auto r = mgr.follow_exec(caller, id, eid, from_out, from_err, sub); !r) sse->close();
    });
  });

  r.add(verb::post, "/v1/sessions/{id}/execs/{eid}/stdin", docs::write_stdin,
        [&](Request& req, Responder& res) {
          auto close = req.query_flag("close");
          if (!close) return res.error(close.error());
          ctx.server.post_blocking([&mgr, responder = res.shared_from_this(), caller = caller_of(req),
                                    id = std::string(req.param("id")), eid = std::string(req.param("eid")),
                                    data = req.body, close = *close] {
            auto r = mgr.write_stdin(caller, id, eid, data, close);
            if (!r) return responder->error(from_error(r.error()).with_session(id).with_exec(eid));
            responder->no_content();
          });
        },
        upload_options(ctx));

  r.add(verb::post, "/v1/sessions/{id}/execs/{eid}/kill", docs::kill_exec, [&](Request& req, Responder& res) {
    auto body = body_object(req);
    if (!body) return res.error(body.error());
    JsonFields f(*body);
    if (auto ok = f.only({"signal", "grace_s"}); !ok) return res.error(ok.error());
    auto name = f.string("signal");
    if (!name) return res.error(name.error());
    auto grace = f.number("grace_s");
    if (!grace) return res.error(grace.error());
    int sig = SIGTERM;
    if (*name) {
      static const std::pair<const char*, int> kSignals[] = {
          {"SIGTERM", SIGTERM}, {"SIGKILL", SIGKILL}, {"SIGINT", SIGINT}, {"SIGHUP", SIGHUP},
          {"SIGQUIT", SIGQUIT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}};
      sig = 0;
      for (auto [n, s] : kSignals)
        if (**name == n) sig = s;
      if (!sig) return res.error(ApiError::invalid_request("field `signal` must be one of SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2"));
    }
    double g = grace->value_or(2.0);
    if (g < 0 || g > 300) return res.error(ApiError::invalid_request("field `grace_s` must be 0..300"));
    answer_blocking(ctx, res, 202,
                    [&mgr, caller = caller_of(req), id = std::string(req.param("id")),
                     eid = std::string(req.param("eid")), sig, g] {
                      return lift(mgr.kill_exec(caller, id, eid, sig,
                                                std::chrono::milliseconds(static_cast<int64_t>(g * 1000))),
                                  id, eid);
                    });
  });
}

}  // namespace cela::api
