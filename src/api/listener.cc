#include "api/listener.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <cstring>

#include "api/connection.h"
#include "api/server_core.h"

namespace cela::api::detail {
namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// After a failed accept (e.g. EMFILE), the pending connection is still queued: retrying
// at once would spin.
constexpr std::chrono::milliseconds kFirstBackoff{10};
constexpr std::chrono::milliseconds kMaxBackoff{1000};
// Connections answered through the spare descriptor per backoff round.
constexpr int kShedPerRound = 64;

bool out_of_descriptors(const error_code& ec) {
  return ec == asio::error::no_descriptors || ec.value() == ENFILE;
}

int open_spare() {
  return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

}  // namespace

Result<UniqueFd> listen_unix_socket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return fail(ErrorCode::invalid_argument, "unix socket path empty or too long: " + path);
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const auto* sa = reinterpret_cast<const sockaddr*>(&addr);

  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return fail(ErrorCode::invalid_argument, "exists and is not a socket: " + path);
    }
    UniqueFd probe(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (probe && connect(probe.get(), sa, sizeof addr) == 0) {
      return sys_fail("another server is listening on " + path, EADDRINUSE);
    }
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      return sys_fail("remove stale socket " + path);
  } else if (errno != ENOENT) {
    return sys_fail("stat " + path);
  }

  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return sys_fail("socket(AF_UNIX)");
  if (bind(fd.get(), sa, sizeof addr) != 0) return sys_fail("bind " + path);
  // Before listen(): until then no connect() succeeds, so there is no moment when the
  // socket accepts other users.
  if (chmod(path.c_str(), 0600) != 0) {
    int err = errno;
    unlink(path.c_str());
    return sys_fail("chmod 0600 " + path, err);
  }
  if (listen(fd.get(), SOMAXCONN) != 0) {
    int err = errno;
    unlink(path.c_str());
    return sys_fail("listen on " + path, err);
  }
  return fd;
}

Result<UniqueFd> listen_tcp_socket(const std::string& host, std::uint16_t port,
                                   std::uint16_t& bound_port, int& family) {
  error_code ec;
  asio::ip::address address = asio::ip::make_address(host, ec);
  if (ec) return fail(ErrorCode::invalid_argument, "TCP host is not an IP address: " + host);
  asio::ip::tcp::endpoint endpoint(address, port);
  family = address.is_v6() ? AF_INET6 : AF_INET;
  std::string where = host + ":" + std::to_string(port);

  UniqueFd fd(socket(family, SOCK_STREAM | SOCK_CLOEXEC, IPPROTO_TCP));
  if (!fd) return sys_fail("socket for " + where);
  int one = 1;
  // A restarted daemon rebinds at once despite connections of its predecessor in TIME_WAIT.
  if (setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    return sys_fail("SO_REUSEADDR on " + where);
  }
  if (bind(fd.get(), endpoint.data(), static_cast<socklen_t>(endpoint.size())) != 0) {
    return sys_fail("bind " + where);
  }
  if (listen(fd.get(), SOMAXCONN) != 0) return sys_fail("listen on " + where);

  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
    return sys_fail("getsockname for " + where);
  }
  bound_port = ntohs(family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return fd;
}

Listener::Listener(ServerCore& core, UniqueFd fd, int family, Transport transport,
                   std::string label)
    : core_(core),
      acceptor_(asio::make_strand(core.ioc),
                asio::generic::stream_protocol(family, family == AF_UNIX ? 0 : IPPROTO_TCP),
                fd.release()),
      transport_(transport),
      label_(std::move(label)),
      retry_timer_(acceptor_.get_executor()),
      spare_(open_spare()) {}

void Listener::start() {
  asio::post(acceptor_.get_executor(), [self = shared_from_this()] { self->accept(); });
}

void Listener::close() {
  asio::post(acceptor_.get_executor(), [self = shared_from_this()] {
    error_code ignored;
    self->acceptor_.close(ignored);
    self->retry_timer_.cancel();
  });
}

void Listener::accept() {
  acceptor_.async_accept(
      asio::make_strand(core_.ioc), [self = shared_from_this()](error_code ec, auto socket) {
        if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
        if (ec == asio::error::connection_aborted) return self->accept();
        if (ec) return self->on_accept_failed(ec);
        if (self->backoff_.count() > 0) {
          self->core_.log("accept on " + self->label_ + ": accepting again (" +
                          std::to_string(self->shed_) + " connection(s) answered 503 meanwhile)");
          self->backoff_ = std::chrono::milliseconds{0};
          self->shed_ = 0;
        }
        if (!self->spare_) self->spare_.reset(open_spare());
        admit_connection(self->core_, Socket(std::move(socket)), self->transport_, self->label_);
        self->accept();
      });
}

void Listener::on_accept_failed(const error_code& ec) {
  if (backoff_.count() == 0) {
    core_.log("accept on " + label_ + ": " + ec.message() +
              (out_of_descriptors(ec) ? "; answering 503 and retrying until descriptors free up"
                                      : "; retrying"));
    backoff_ = kFirstBackoff;
  } else {
    backoff_ = std::min(backoff_ * 2, kMaxBackoff);
  }
  if (out_of_descriptors(ec)) shed_with_spare();
  retry_timer_.expires_after(backoff_);
  retry_timer_.async_wait([self = shared_from_this()](error_code wait_ec) {
    if (!wait_ec) self->accept();
  });
}

// Runs on the acceptor's strand with no accept pending, so the raw accept4 here cannot
// race asio's. Stops as soon as descriptors are back (a second one can be opened
// besides the spare): those clients are then served, not refused.
void Listener::shed_with_spare() {
  if (!spare_) spare_.reset(open_spare());
  int listen_fd = acceptor_.native_handle();
  for (int i = 0; i < kShedPerRound && spare_; ++i) {
    if (UniqueFd probe(open_spare()); probe) return;
    spare_.reset();
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      refuse_at_once(fd, ApiError::capacity_exceeded("server is out of file descriptors"));
      ++shed_;
    }
    spare_.reset(open_spare());  // fails only when another thread took the slot
    if (fd < 0) return;          // EAGAIN: nobody is waiting
  }
}

}  // namespace cela::api::detail
