// A template's start command (rootfs/template.h StartCommand): the server a session of
// that template runs from its boot, e.g. the code interpreter's kernel server. It is an
// ordinary exec of the session (recorded, audited, listed among its processes, ended
// with it), started as the session's tenant, with no timeout, and it does not hold the
// idle clock. With a ready_port, the create answers once something accepts on that port
// inside the session, through the same socket the port proxy uses.
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>

#include "session/manager.h"
#include "session/state.h"

namespace cela::session {
namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
constexpr auto kReadyPoll = std::chrono::milliseconds(50);
}

void SessionManager::run_start_command(std::shared_ptr<Session> session, Done<void> done) {
  assert_on_reactor();
  const rootfs::StartCommand& start = *session->tmpl.start;
  ExecSpec spec;
  spec.cmd = start.cmd;
  spec.user = start.user == "root" ? ExecUser::root : ExecUser::user;
  spec.timeout_ms = 0;  // runs as long as the session
  Caller caller{session->record.tenant_id, false, false};
  auto deadline = Clock::now() + std::chrono::seconds(start.ready_timeout_s);
  uint16_t port = start.ready_port;
  start_exec(caller, session->record.id, std::move(spec),
             [this, session, port, deadline, done = std::move(done)](Result<ExecRecord> r) mutable {
               if (!r) return done(fail(r.error().code, "the template's start command: " + r.error().message()));
               if (auto it = session->execs.find(r->id); it != session->execs.end()) it->second->service = true;
               arm_session_timer(session);
               if (port == 0) return done({});
               wait_start_ready(session, r->id, deadline, std::move(done));
             });
}

void SessionManager::wait_start_ready(std::shared_ptr<Session> session, std::string exec_id, Clock::time_point deadline,
                                      Done<void> done) {
  assert_on_reactor();
  const rootfs::StartCommand& start = *session->tmpl.start;
  if (session->ended || !session->instance) return done(fail(ErrorCode::gone, "the session ended while starting"));
  if (auto it = session->execs.find(exec_id); it == session->execs.end() || it->second->finished)
    return done(fail(ErrorCode::invalid_argument, "the template's start command (" + start.cmd +
                                                      ") ended before it listened on port " +
                                                      std::to_string(start.ready_port)));
  if (Clock::now() > deadline)
    return done(fail(ErrorCode::limit, "the template's start command did not listen on port " +
                                           std::to_string(start.ready_port) + " within " +
                                           std::to_string(start.ready_timeout_s) + " s"));
  auto retry = [this, session, exec_id, deadline](Done<void> d) {
    auto timer = std::make_shared<asio::steady_timer>(reactor_, kReadyPoll);
    timer->async_wait([this, timer, session, exec_id, deadline, d = std::move(d)](boost::system::error_code) mutable {
      wait_start_ready(session, exec_id, deadline, std::move(d));
    });
  };
  session->instance->open_socket([this, session, port = start.ready_port, retry,
                                  done = std::move(done)](Result<UniqueFd> fd) mutable {
    on_reactor([this, session, port, retry, fd = std::make_shared<Result<UniqueFd>>(std::move(fd)),
                done = std::move(done)]() mutable {
      if (!*fd) return retry(std::move(done));
      auto sock = std::make_shared<tcp::socket>(reactor_);
      boost::system::error_code ec;
      sock->assign(tcp::v4(), (*fd)->release(), ec);
      if (ec) return retry(std::move(done));
      sock->async_connect(tcp::endpoint(asio::ip::address_v4::loopback(), port),
                          [sock, retry, done = std::move(done)](boost::system::error_code cec) mutable {
                            if (cec) return retry(std::move(done));
                            done({});
                          });
    });
  });
}

}  // namespace cela::session
