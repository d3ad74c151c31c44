// Processes and ports of a session (API.md "Processes, terminals, ports"): the list and
// signals read /proc on the blocking pool; the port proxy asks the session for a socket
// of its network namespace and hands the request to a relay (api/port_proxy.h).
#include <boost/json.hpp>
#include <charconv>

#include "api/json_body.h"
#include "api/port_proxy.h"
#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"
#include "api/session_specs.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

template <class T>
std::optional<T> decimal(std::string_view text) {
  T v{};
  auto r = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || r.ec != std::errc() || r.ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

json::object render(const session::ProcessRecord& p) {
  return {{"pid", p.pid},
          {"ppid", p.ppid},
          {"user", p.user},
          {"cmd", p.cmd},
          {"exec_id", p.exec_id ? json::value(*p.exec_id) : json::value(nullptr)}};
}

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

}  // namespace

void proxy_to_port(RouteContext& ctx, Request& req, Responder& res, const PortTarget& to) {
  auto port = decimal<uint32_t>(to.port);
  if (!port || *port < 1 || *port > 65535) return res.error(ApiError::invalid_request("port must be 1..65535"));
  auto target = proxied_target(req.target, to.skip);
  if (!target) return res.error(target.error());
  ProxiedRequest pr{req.method_name, std::move(*target), req.headers, static_cast<uint16_t>(*port), to.prefix,
                    to.session_id};
  const auto cfg = ctx.sessions.config()->ports;  // a copy: a reload may replace the snapshot
  PortRelayOptions options{millis(cfg.connect_timeout_s), millis(cfg.idle_timeout_s)};
  ctx.sessions.open_port(
      caller_of(req), to.session_id, static_cast<uint16_t>(*port),
      [r = res.shared_from_this(), pr = std::move(pr), options, id = to.session_id,
       gone_is_bad_gateway = to.gone_is_bad_gateway](Result<session::PortSocket> s) mutable {
        if (!s) {
          const ErrorCode code = s.error().code;
          ApiError e = code == ErrorCode::quota_exceeded ? ApiError::rate_limited(s.error().message(), 1)
                       : gone_is_bad_gateway && (code == ErrorCode::not_found || code == ErrorCode::gone)
                           ? ApiError::bad_gateway("sandbox " + id + " not found")
                           : from_error(s.error());
          return r->error(e.with_session(id));
        }
        r->relay(make_port_relay(std::move(s->socket), std::move(s->lease), std::move(pr), options));
      });
}

void add_process_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  session::SessionManager& mgr = ctx.sessions;

  r.add(verb::get, "/v1/sessions/{id}/processes", docs::list_processes, [&](Request& req, Responder& res) {
    std::string id(req.param("id"));
    answer_blocking(ctx, res, 200, [&mgr, caller = caller_of(req), id]() -> ApiResult<json::value> {
      auto list = mgr.processes(caller, id);
      if (!list) return api_fail(from_error(list.error()).with_session(id));
      json::array out;
      for (const auto& p : *list) out.push_back(render(p));
      return json::object{{"processes", std::move(out)}};
    });
  });

  r.add(verb::post, "/v1/sessions/{id}/processes/{pid}/signal", docs::signal_process,
        [&](Request& req, Responder& res) {
          auto body = parse_json_object(req.body);
          if (!body) return res.error(body.error());
          auto sig = parse_process_signal(*body);
          if (!sig) return res.error(sig.error());
          std::string id(req.param("id"));
          auto pid = decimal<int64_t>(req.param("pid"));
          if (!pid) return res.error(ApiError::invalid_request("pid must be a whole number"));
          ctx.server.post_blocking([&mgr, r = res.shared_from_this(), caller = caller_of(req), id, pid = *pid,
                                    sig = *sig] {
            auto sent = mgr.signal_process(caller, id, pid, sig);
            if (!sent) return r->error(from_error(sent.error()).with_session(id));
            r->no_content();
          });
        });

  // Every method, one route each (their operation ids differ); the body streams.
  auto proxy = [&](Request& req, Responder& res) {
    std::string id(req.param("id"));
    std::string port_text(req.param("port"));
    // /v1/sessions/{id}/ports/{port}: five segments, then the path inside.
    proxy_to_port(ctx, req, res, PortTarget{id, port_text, 5, "/v1/sessions/" + id + "/ports/" + port_text, false});
  };
  for (verb v : {verb::get, verb::head, verb::post, verb::put, verb::patch, verb::delete_, verb::options})
    r.add(v, "/v1/sessions/{id}/ports/{port}/{path...}", docs::port_proxy(http::to_string(v)), proxy,
          RouteOptions().stream_body().with_body_limit(std::numeric_limits<std::size_t>::max()));
}

}  // namespace cela::api
