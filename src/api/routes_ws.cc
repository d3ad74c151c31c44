// GET /v1/sessions/{id}/ws (API.md "WebSocket"): interactive execs over one socket.
//
// The route authenticates as any other (bearer key on TCP, peer credentials on the
// unix socket) and looks the session up for the caller's tenant before the upgrade, so
// another tenant's session is a 404, never a socket. Each client message becomes the
// same asynchronous SessionManager call its REST route makes (the bodies parsed by the
// same code, api/session_specs.cc); output comes through follow_exec, the machinery of
// the SSE output stream, so offsets, replay and resume are the SSE ones.
//
// Threads: messages arrive on the socket's strand; every session call posts to the
// session reactor, whose completions and output callbacks only send() on the socket
// (thread-safe, bounded). This file keeps no session state of its own.
#include <boost/json.hpp>

#include "api/responder.h"
#include "api/route_docs.h"
#include "api/routes.h"
#include "api/websocket.h"
#include "api/ws_protocol.h"

namespace cela::api {
namespace {

// One exec's output to the socket; called on the session reactor.
class SocketSink final : public session::OutputSink {
 public:
  SocketSink(std::shared_ptr<WebSocket> socket, std::string exec_id, uint64_t out, uint64_t err)
      : socket_(std::move(socket)), exec_id_(std::move(exec_id)), out_(out), err_(err) {}
  void on_output(session::Stream stream, uint64_t offset, std::string_view data) override {
    (stream == session::Stream::stdout_stream ? out_ : err_) = offset;
    socket_->send(ws::output_message(stream, exec_id_, data, ws::position(out_, err_)));
  }
  void on_exit(const session::ExecRecord& record) override { socket_->send(ws::exit_message(record)); }
  bool closed() const override { return socket_->closed(); }
  void when_drained(size_t max_queued, std::function<void()> resume) override {
    socket_->on_drained(max_queued, std::move(resume));
  }

 private:
  std::shared_ptr<WebSocket> socket_;
  const std::string exec_id_;
  uint64_t out_, err_;  // the reactor calls one sink from one thread at a time
};

class SessionSocket final : public WebSocketHandler, public std::enable_shared_from_this<SessionSocket> {
 public:
  SessionSocket(session::SessionManager& sessions, session::Caller caller, std::string session_id,
                std::string request_id)
      : sessions_(sessions),
        caller_(std::move(caller)),
        session_id_(std::move(session_id)),
        request_id_(std::move(request_id)) {}

  void on_open(std::shared_ptr<WebSocket> socket) override { socket_ = std::move(socket); }

  void on_text(std::string text) override {
    // The handler's calls start on the socket's strand; session state is reached only
    // through the manager's reactor-posting calls.
    if (!socket_->on_strand()) {
      std::fputs("cela: internal error: websocket message handled off its strand\n", stderr);
      std::abort();
    }
    auto message = ws::parse_client_message(text, *sessions_.config());
    if (!message) return error(message.error().ref, message.error().exec, message.error().error);
    std::visit([this](auto& m) { handle(m); }, *message);
  }

  void on_close() override { socket_.reset(); }

 private:
  // Sends an error about `ref` / `exec`; from any thread.
  static void send_error(const std::shared_ptr<WebSocket>& socket, const std::string& request_id,
                         const std::string& ref, const std::string& exec, ApiError e) {
    socket->send(ws::error_message(ref, exec, e, request_id));
  }
  void error(const std::string& ref, const std::string& exec, const ApiError& e) {
    send_error(socket_, request_id_, ref, exec, e.with_session(session_id_));
  }
  // A completion that reports only failures, as an error about `exec`.
  session::Done<void> failures(std::string exec) {
    return [socket = socket_, rid = request_id_, sid = session_id_, exec](Result<void> r) {
      if (!r) send_error(socket, rid, {}, exec, from_error(r.error()).with_session(sid).with_exec(exec));
    };
  }
  void follow(const std::string& exec, uint64_t out, uint64_t err, std::string ref = {}) {
    auto sink = std::make_shared<SocketSink>(socket_, exec, out, err);
    sessions_.follow_exec(caller_, session_id_, exec, out, err, sink,
                          [socket = socket_, rid = request_id_, sid = session_id_, exec, ref](Result<void> r) {
                            if (!r)
                              send_error(socket, rid, ref, exec,
                                         from_error(r.error()).with_session(sid).with_exec(exec));
                          });
  }

  void handle(ws::Exec& m) {
    // `started` goes out before any output: the follow starts from the completion.
    sessions_.start_exec(caller_, session_id_, std::move(m.spec),
                         [self = shared_from_this(), socket = socket_, ref = m.ref](Result<session::ExecRecord> r) {
                           if (!r)
                             return send_error(socket, self->request_id_, ref, {},
                                               from_error(r.error()).with_session(self->session_id_));
                           socket->send(ws::started_message(ref, *r));
                           self->follow(r->id, 0, 0, ref);
                         });
  }
  void handle(ws::Stdin& m) {
    sessions_.write_stdin(caller_, session_id_, m.exec, std::move(m.data), false, failures(m.exec));
  }
  void handle(ws::CloseStdin& m) { sessions_.write_stdin(caller_, session_id_, m.exec, {}, true, failures(m.exec)); }
  void handle(ws::Kill& m) {
    auto done = failures(m.exec);
    sessions_.kill_exec(caller_, session_id_, m.exec, m.spec, [done](Result<session::ExecRecord> r) {
      done(r ? Result<void>{} : Result<void>(std::unexpected(r.error())));
    });
  }
  void handle(ws::Resize& m) { sessions_.resize_exec(caller_, session_id_, m.exec, m.cols, m.rows, failures(m.exec)); }
  void handle(ws::Attach& m) { follow(m.exec, m.stdout_from, m.stderr_from); }

  session::SessionManager& sessions_;
  const session::Caller caller_;
  const std::string session_id_;
  const std::string request_id_;
  std::shared_ptr<WebSocket> socket_;  // strand only
};

}  // namespace

void add_ws_routes(RouteContext& ctx) {
  auto& mgr = ctx.sessions;
  ctx.server.router().add(http::verb::get, "/v1/sessions/{id}/ws", docs::session_ws, [&](Request& req, Responder& res) {
    std::string id(req.param("id"));
    // The tenant's session, looked up (a store read) before anything is upgraded.
    ctx.server.post_blocking([&mgr, r = res.shared_from_this(), caller = caller_of(req), id] {
      auto rec = mgr.get(caller, id);
      if (!rec) return r->error(from_error(rec.error()).with_session(id));
      r->upgrade_websocket(std::make_shared<SessionSocket>(mgr, caller, id, r->request_id()));
    });
  });
}

}  // namespace cela::api
