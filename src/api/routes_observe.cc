// Metrics, events and the audit log (API.md "Observability"): GET /metrics, a
// session's metrics and events (?follow=1 as SSE), and GET /v1/audit. Reads go to the
// blocking pool (store) or the session reactor (cgroups); a follower holds no thread.
#include <boost/json.hpp>
#include <charconv>
#include <mutex>

#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"
#include "api/stream.h"
#include "common/json_text.h"
#include "common/time.h"
#include "obs/audit.h"
#include "obs/metrics.h"

namespace cela::api {
namespace json = boost::json;
using http::verb;

namespace {

ApiResult<int64_t> whole_number(std::string_view text, std::string_view what, int64_t min, int64_t max) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < min || v > max)
    return std::unexpected(ApiError::invalid_request(std::string(what) + " must be a whole number in " +
                                                     std::to_string(min) + ".." + std::to_string(max)));
  return v;
}

json::object limit_event_json(const session::LimitEvent& e) {
  return {{"at", e.at},
          {"kind", e.kind},
          {"detail", e.detail},
          {"exec_id", e.exec_id.empty() ? json::value(nullptr) : json::value(e.exec_id)}};
}

json::value opt(const std::optional<uint64_t>& v) { return v ? json::value(*v) : json::value(nullptr); }

json::object metrics_json(const session::SessionMetrics& m) {
  json::array events, history;
  for (const auto& e : m.limit_events) events.push_back(limit_event_json(e));
  for (const auto& h : m.history)
    history.push_back(json::object{{"at", format_rfc3339(h.at_ms)},
                                   {"cpu_ms", h.cpu_ms},
                                   {"memory_bytes", h.memory_bytes},
                                   {"pids", h.pids},
                                   {"disk_used_bytes", h.disk_used_bytes}});
  return {{"session_id", m.session_id},
          {"state", m.state},
          {"live", m.live},
          {"cpu_ms", m.cpu_ms},
          {"cpu_throttled_ms", m.cpu_throttled_ms},
          {"memory_bytes", m.memory_bytes},
          {"memory_peak_bytes", m.memory_peak_bytes},
          {"pids", m.pids},
          {"pids_peak", m.pids_peak},
          {"disk_used_bytes", opt(m.disk_used_bytes)},
          {"disk_written_bytes", opt(m.disk_written_bytes)},
          {"net_tx_bytes", opt(m.net_tx_bytes)},
          {"net_rx_bytes", opt(m.net_rx_bytes)},
          {"wall_ms", m.wall_ms},
          {"oom_kills", m.oom_kills},
          {"processes_executed", m.processes_executed},
          {"seccomp_violations", m.seccomp_violations},
          {"limit_events", std::move(events)},
          {"history", std::move(history)}};
}

bool is_event_kind(std::string_view kind) {
  for (const auto& k : session::session_event_kinds())
    if (kind.starts_with(k)) return true;
  return false;
}

// One follower of a session's events: records are buffered while the stored ones are
// replayed, then sent live; nothing is sent twice (ids are seqs, increasing).
struct EventFollower : std::enable_shared_from_this<EventFollower> {
  std::mutex mu;
  std::shared_ptr<SseStream> sse;
  bool replaying = true;
  int64_t last_sent = 0;
  std::vector<obs::AuditRecord> buffered;
  uint64_t token = 0;

  // Under mu.
  void send_locked(const obs::AuditRecord& r) {
    if (r.seq <= last_sent || !is_event_kind(r.kind)) return;
    last_sent = r.seq;
    sse->send(r.kind, std::to_string(r.seq), json_text(r.to_json()));
    if (r.kind == "session.terminate") sse->close();
  }
};

}  // namespace

void add_observe_routes(RouteContext& ctx) {
  Router& r = ctx.server.router();
  auto& mgr = ctx.sessions;
  const bool metrics_public = mgr.config()->metrics.public_endpoint;

  r.add(
      verb::get, "/metrics", docs::prometheus_metrics,
      [metrics_public](Request& req, Responder& res) {
        if (!metrics_public && !(req.principal && req.principal->host_admin))
          return res.error(ApiError::forbidden("GET /metrics is for the host's admin (or set metrics.public)"));
        res.raw(200, "text/plain; version=0.0.4; charset=utf-8", obs::metrics().render());
      },
      metrics_public ? RouteOptions().make_public() : RouteOptions());

  r.add(verb::get, "/v1/sessions/{id}/metrics", docs::session_metrics, [&](Request& req, Responder& res) {
    std::string id(req.param("id"));
    mgr.metrics(caller_of(req), id, [r = res.shared_from_this(), id](Result<session::SessionMetrics> m) {
      if (!m) return r->error(from_error(m.error()).with_session(id));
      r->json(200, metrics_json(*m));
    });
  });

  r.add(verb::get, "/v1/sessions/{id}/events", docs::session_events, [&](Request& req, Responder& res) {
    auto follow = req.query_flag("follow");
    if (!follow) return res.error(follow.error());
    int64_t after = 0;
    if (auto a = req.query_value("after")) {
      auto v = whole_number(*a, "query `after`", 0, INT64_MAX);
      if (!v) return res.error(v.error());
      after = *v;
    }
    if (*follow) {
      if (auto last = last_event_id(req)) {
        auto v = whole_number(*last, "Last-Event-ID", 0, INT64_MAX);
        if (!v) return res.error(v.error());
        after = *v;
      }
    }
    std::string id(req.param("id"));
    session::Caller caller = caller_of(req);
    ctx.server.post_blocking([&mgr, &server = ctx.server, responder = res.shared_from_this(), caller, id, after,
                              follow = *follow] {
      obs::AuditLog* log = obs::installed_audit();
      std::shared_ptr<EventFollower> f;
      if (follow && log) {
        // Subscribed before the replay is read: a record written in between is
        // buffered, not lost.
        f = std::make_shared<EventFollower>();
        f->last_sent = after;
        std::weak_ptr<EventFollower> weak = f;
        f->token = log->subscribe(id, [weak](const obs::AuditRecord& rec) {
          auto ff = weak.lock();
          if (!ff) return;
          std::lock_guard lock(ff->mu);
          if (ff->replaying) ff->buffered.push_back(rec);
          else if (ff->sse && !ff->sse->closed()) ff->send_locked(rec);
        });
      }
      bool ended = false;
      auto events = mgr.session_events(caller, id, after, ended);
      if (!events) {
        if (f) log->unsubscribe(f->token);
        return responder->error(from_error(events.error()).with_session(id));
      }
      if (!follow) {
        json::array out;
        for (const auto& e : *events) out.push_back(e.to_json());
        return responder->json(200, json::object{{"events", std::move(out)}});
      }
      auto sse = responder->start_sse();
      if (!f) {  // no audit log: what is stored, then the end
        for (const auto& e : *events) sse->send(e.kind, std::to_string(e.seq), json_text(e.to_json()));
        return sse->close();
      }
      // Never inline: a close can run its callbacks on the thread of a send made under
      // the audit log's lock.
      // The follower lives as long as its stream: this callback holds it (the
      // subscription only has a weak reference).
      sse->on_close([&server, log, f] {
        server.post_blocking([log, token = f->token] { log->unsubscribe(token); });
      });
      std::lock_guard lock(f->mu);
      f->sse = sse;
      for (const auto& e : *events) f->send_locked(e);
      for (const auto& e : f->buffered) f->send_locked(e);
      f->buffered.clear();
      f->replaying = false;
      // Ended before we looked, and its end already sent (or purged): nothing more comes.
      if (ended && !sse->closed()) sse->close();
    });
  });

  r.add(verb::get, "/v1/audit", docs::list_audit, [&](Request& req, Responder& res) {
    session::AuditQuery q;
    if (auto s = req.query_value("session")) q.session_id = std::string(*s);
    for (auto k : req.query_values("kind")) {
      if (k.empty()) return res.error(ApiError::invalid_request("query `kind` must not be empty"));
      q.kinds.emplace_back(k);
    }
    if (auto s = req.query_value("since")) {
      auto ms = parse_rfc3339(*s);
      if (!ms) return res.error(ApiError::invalid_request("query `since` must be an RFC 3339 time"));
      q.since_ms = *ms;
    }
    if (auto l = req.query_value("limit")) {
      auto v = whole_number(*l, "query `limit`", 1, 1000);
      if (!v) return res.error(v.error());
      q.limit = *v;
    }
    if (auto c = req.query_value("cursor")) {
      auto v = whole_number(*c, "query `cursor`", 0, INT64_MAX);
      if (!v) return res.error(v.error());
      q.after_seq = *v;
    }
    bool jsonl = false;
    if (auto fmt = req.query_value("format")) {
      if (*fmt != "json" && *fmt != "jsonl")
        return res.error(ApiError::invalid_request("query `format` must be json or jsonl"));
      jsonl = *fmt == "jsonl";
    }
    ctx.server.post_blocking([&mgr, responder = res.shared_from_this(), caller = caller_of(req), q, jsonl] {
      auto page = mgr.audit_records(caller, q);
      if (!page) return responder->error(from_error(page.error()));
      std::string cursor = page->next_after ? std::to_string(page->next_after) : "";
      if (jsonl) {
        std::string body;
        for (const auto& rec : page->records) body += json_text(rec.to_json()) + "\n";
        Headers extra;
        if (!cursor.empty()) extra.emplace_back("X-Next-Cursor", cursor);
        return responder->raw(200, "application/x-ndjson", std::move(body), std::move(extra));
      }
      json::array records;
      for (const auto& rec : page->records) records.push_back(rec.to_json());
      responder->json(200, json::object{{"records", std::move(records)},
                                        {"next_cursor", cursor.empty() ? json::value(nullptr) : json::value(cursor)}});
    });
  });
}

}  // namespace cela::api
