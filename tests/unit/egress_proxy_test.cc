// The egress proxy end to end on loopback, without a sandbox: the test makes the door
// listener itself (a session's init makes it inside its netns) and plays the client
// through it, against upstream servers of its own.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "net/egress_proxy.h"
#include "net/internal_service.h"

namespace cela::net {
namespace {
namespace http = boost::beast::http;

UniqueFd listen_loopback(uint16_t& port) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::listen(s.get(), 64), 0);
  socklen_t len = sizeof a;
  ::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len);
  port = ntohs(a.sin_port);
  return s;
}

UniqueFd connect_to(uint16_t port) {
  UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  EXPECT_EQ(::connect(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{10, 0};
  ::setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return s;
}

void send_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    ASSERT_GT(n, 0);
    data.remove_prefix(static_cast<size_t>(n));
  }
}

std::string read_until_closed(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

std::string read_some(int fd, size_t at_least) {
  std::string out;
  char buf[4096];
  while (out.size() < at_least) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string read_until(int fd, std::string_view needle) {
  std::string out;
  char buf[4096];
  while (out.find(needle) == std::string::npos) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// A one-thread upstream: answers every connection with `answer` after reading a
// request header (or echoes, for the tunnel test), counting connections.
class Upstream {
 public:
  explicit Upstream(bool echo) : echo_(echo) {
    fd_ = listen_loopback(port_);
    thread_ = std::thread([this] { run(); });
  }
  ~Upstream() {
    stop_ = true;
    ::shutdown(fd_.get(), SHUT_RDWR);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  int connections() const { return connections_; }
  std::string last_request() {
    std::lock_guard lock(mu_);
    return last_;
  }

 private:
  void run() {
    while (!stop_) {
      int c = ::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      ++connections_;
      UniqueFd conn(c);
      if (echo_) {
        char buf[4096];
        for (;;) {
          ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          send_all(c, std::string_view(buf, static_cast<size_t>(n)));
        }
        continue;
      }
      std::string req;
      char buf[4096];
      while (req.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard lock(mu_);
        last_ = req;
      }
      send_all(c, "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nContent-Type: text/plain\r\n\r\nupstream");
    }
  }

  bool echo_;
  uint16_t port_ = 0;
  UniqueFd fd_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::mutex mu_;
  std::string last_;
};

class Recorder final : public EgressObserver {
 public:
  void on_attempt(const EgressAttempt& a) override {
    std::lock_guard lock(mu_);
    attempts.push_back(a);
    cv_.notify_all();
  }
  void on_limit(const std::string& session_id, const std::string& kind, const std::string& detail) override {
    std::lock_guard lock(mu_);
    limits.push_back(session_id + " " + kind + " " + detail);
    cv_.notify_all();
  }
  void on_unrecorded(const std::string& session_id, const std::string& tenant_id,
                     const UnrecordedAttempts& u) override {
    std::lock_guard lock(mu_);
    unrecorded.push_back({session_id + " " + tenant_id, u});
    cv_.notify_all();
  }
  std::vector<std::pair<std::string, UnrecordedAttempts>> wait_unrecorded(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return unrecorded.size() >= n; });
    return unrecorded;
  }
  size_t attempt_count() {
    std::lock_guard lock(mu_);
    return attempts.size();
  }
  std::vector<EgressAttempt> wait_attempts(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return attempts.size() >= n; });
    return attempts;
  }
  std::vector<std::string> wait_limits(size_t n) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(10), [&] { return limits.size() >= n; });
    return limits;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<EgressAttempt> attempts;
  std::vector<std::string> limits;
  std::vector<std::pair<std::string, UnrecordedAttempts>> unrecorded;
};

// A tiny internal service: answers with who asked and what.
class EchoService final : public InternalService {
 public:
  std::string host() const override { return "svc.cela.internal"; }
  void handle(const DoorPeer& peer, HttpRequest request, Reply reply) override {
    ++calls;
    // Answer from another thread, as a real service may.
    std::thread([peer, request = std::move(request), reply = std::move(reply)] {
      http::response<http::string_body> res{http::status::ok, request.version()};
      res.set(http::field::content_type, "text/plain");
      res.body() = "service " + peer.session_id + " " + peer.tenant_id + " " + std::string(request.target()) + " " +
                   request.body();
      res.keep_alive(request.keep_alive());
      res.prepare_payload();
      reply(http::message_generator(std::move(res)));
    }).detach();
  }
  std::atomic<int> calls{0};
};

struct Fixture {
  explicit Fixture(EgressConfig config = {}, std::vector<std::string> allow = {}, std::vector<std::string> deny = {}) {
    if (config.allow_cidrs.empty()) config.allow_cidrs = {"127.0.0.0/8"};
    config.hosts["allowed.test"] = {"127.0.0.1"};
    config.hosts["metadata.test"] = {"169.254.169.254"};
    config.hosts["rebind.test"] = {"127.0.0.1", "10.1.2.3"};
    auto p = EgressProxy::start(config, {"127.0.0.1:1"}, &recorder);
    EXPECT_TRUE(p) << (p ? "" : p.error().message());
    proxy = std::move(*p);
    service = std::make_shared<EchoService>();
    proxy->add_service(service);
    auto policy = parse_rules(allow, deny);
    EXPECT_TRUE(policy);
    EXPECT_TRUE(proxy->open_door("s-1", "t-1", listen_loopback(door), EgressPolicy{*policy, std::nullopt}));
  }
  Recorder recorder;
  std::unique_ptr<EgressProxy> proxy;
  std::shared_ptr<EchoService> service;
  uint16_t door = 0;
};

TEST(EgressProxy, ConnectTunnelsToAnAllowedHostAndRecordsBytes) {
  Upstream echo(true);
  Fixture f({}, {"allowed.test:" + std::to_string(echo.port())});
  auto c = connect_to(f.door);
  send_all(c.get(), "CONNECT allowed.test:" + std::to_string(echo.port()) + " HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string head = read_some(c.get(), 39);
  EXPECT_TRUE(head.starts_with("HTTP/1.1 200")) << head;
  send_all(c.get(), "ping-through-the-tunnel");
  EXPECT_EQ(read_some(c.get(), 23), "ping-through-the-tunnel");
  ::shutdown(c.get(), SHUT_WR);
  read_until_closed(c.get());
  auto attempts = f.recorder.wait_attempts(1);
  ASSERT_EQ(attempts.size(), 1u);
  EXPECT_TRUE(attempts[0].allowed);
  EXPECT_EQ(attempts[0].kind, "connect");
  EXPECT_EQ(attempts[0].host, "allowed.test");
  EXPECT_EQ(attempts[0].ip, "127.0.0.1");
  EXPECT_EQ(attempts[0].bytes_up, 23u);
  EXPECT_EQ(attempts[0].bytes_down, 23u);
  EXPECT_EQ(attempts[0].rule, "session allow allowed.test:" + std::to_string(echo.port()));
}

TEST(EgressProxy, RefusalIs403NamingTheRule) {
  Upstream up(false);
  Fixture f({}, {"allowed.test:" + std::to_string(up.port())}, {"*.internal"});
  auto c = connect_to(f.door);
  send_all(c.get(), "CONNECT api.evil.com:443 HTTP/1.1\r\n\r\n");
  std::string answer = read_until_closed(c.get());
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 403")) << answer;
  EXPECT_NE(answer.find("cela: api.evil.com:443 denied by session policy (no rule matches)\n"), std::string::npos)
      << answer;
  auto d = connect_to(f.door);
  send_all(d.get(), "GET http://x.internal/ HTTP/1.1\r\nHost: x.internal\r\n\r\n");
  answer = read_until_closed(d.get());
  EXPECT_NE(answer.find("denied by session deny *.internal (deny wins)"), std::string::npos) << answer;
  EXPECT_EQ(up.connections(), 0);
}

TEST(EgressProxy, MetadataPrivateAndRebindingNamesAreRefusedBeforeDialling) {
  Upstream up(false);
  Fixture f({}, {"*:*"});
  for (const std::string& target : std::vector<std::string>{"metadata.test:80", "169.254.169.254:80", "[fd00:ec2::254]:80", "[::ffff:10.0.0.1]:80",
                             "100.64.0.1:80", "rebind.test:" + std::to_string(up.port()), "127.0.0.1:1"}) {
    auto c = connect_to(f.door);
    send_all(c.get(), "CONNECT " + target + " HTTP/1.1\r\n\r\n");
    std::string answer = read_until_closed(c.get());
    EXPECT_TRUE(answer.starts_with("HTTP/1.1 403")) << target << ": " << answer;
    EXPECT_NE(answer.find("denied by address policy"), std::string::npos) << target << ": " << answer;
  }
  EXPECT_EQ(up.connections(), 0);  // rebind.test's loopback address was never dialled
}

TEST(EgressProxy, PlainHttpIsForwardedInOriginFormAndKeptAlive) {
  Upstream up(false);
  Fixture f({}, {"allowed.test:" + std::to_string(up.port())});
  auto c = connect_to(f.door);
  std::string url = "http://allowed.test:" + std::to_string(up.port()) + "/path?q=1";
  send_all(c.get(), "GET " + url + " HTTP/1.1\r\nHost: allowed.test\r\nProxy-Authorization: secret\r\n\r\n");
  std::string first = read_until(c.get(), "upstream");
  EXPECT_TRUE(first.starts_with("HTTP/1.1 200")) << first;
  EXPECT_NE(first.find("upstream"), std::string::npos);
  std::string seen = up.last_request();
  EXPECT_TRUE(seen.starts_with("GET /path?q=1 HTTP/1.1\r\n")) << seen;
  EXPECT_EQ(seen.find("secret"), std::string::npos) << seen;
  // The same client connection carries a second request (to an internal service).
  send_all(c.get(), "GET http://svc.cela.internal/simple/ HTTP/1.1\r\nHost: svc.cela.internal\r\nConnection: close\r\n\r\n");
  std::string second = read_until_closed(c.get());
  EXPECT_NE(second.find("service s-1 t-1 /simple/"), std::string::npos) << second;
}

TEST(EgressProxy, InternalServiceGetsTheRequestWithoutResolvingOrPolicy) {
  // No rule at all: the door reaches internal services only.
  Fixture f;
  auto c = connect_to(f.door);
  send_all(c.get(),
           "POST http://SVC.cela.internal:80/x HTTP/1.1\r\nHost: svc.cela.internal\r\nContent-Length: 4\r\n"
           "Connection: close\r\n\r\nbody");
  std::string answer = read_until_closed(c.get());
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer;
  EXPECT_NE(answer.find("service s-1 t-1 /x body"), std::string::npos) << answer;
  EXPECT_EQ(f.service->calls, 1);
  auto d = connect_to(f.door);
  send_all(d.get(), "GET http://elsewhere.test/ HTTP/1.1\r\nHost: elsewhere.test\r\n\r\n");
  EXPECT_NE(read_until_closed(d.get()).find("403"), std::string::npos);
  // CONNECT to the service's name is not a way around plain HTTP.
  auto e = connect_to(f.door);
  send_all(e.get(), "CONNECT svc.cela.internal:443 HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(read_until_closed(e.get()).starts_with("HTTP/1.1 400"));
  EXPECT_EQ(f.service->calls, 1);
}

TEST(EgressProxy, PolicyChangesApplyToNewConnections) {
  Upstream up(false);
  Fixture f;
  std::string get = "GET http://allowed.test:" + std::to_string(up.port()) + "/ HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
  auto c = connect_to(f.door);
  send_all(c.get(), get);
  EXPECT_NE(read_until_closed(c.get()).find("403"), std::string::npos);
  auto rules = parse_rules({"allowed.test:*"}, {});
  f.proxy->set_policy("s-1", EgressPolicy{*rules, std::nullopt});
  std::string answer;
  for (int i = 0; i < 50; ++i) {  // set_policy is posted: the next connection sees it
    auto d = connect_to(f.door);
    send_all(d.get(), get);
    answer = read_until_closed(d.get());
    if (answer.starts_with("HTTP/1.1 200")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 200")) << answer;
}

TEST(EgressProxy, SocksConnectWithRemoteResolution) {
  Upstream echo(true);
  Fixture f({}, {"allowed.test:" + std::to_string(echo.port())});
  auto c = connect_to(f.door);
  send_all(c.get(), std::string("\x05\x01\x00", 3));
  EXPECT_EQ(read_some(c.get(), 2), std::string("\x05\x00", 2));
  std::string req("\x05\x01\x00\x03", 4);
  req += static_cast<char>(12);
  req += "allowed.test";
  req += static_cast<char>(echo.port() >> 8);
  req += static_cast<char>(echo.port() & 0xff);
  send_all(c.get(), req);
  std::string rep = read_some(c.get(), 10);
  ASSERT_EQ(rep.size(), 10u);
  EXPECT_EQ(rep[1], 0);
  send_all(c.get(), "socks-bytes");
  EXPECT_EQ(read_some(c.get(), 11), "socks-bytes");
  // A refused SOCKS target: code 2 (not allowed by ruleset).
  auto d = connect_to(f.door);
  send_all(d.get(), std::string("\x05\x01\x00", 3));
  read_some(d.get(), 2);
  send_all(d.get(), std::string("\x05\x01\x00\x01\xa9\xfe\xa9\xfe\x00\x50", 10));
  rep = read_some(d.get(), 10);
  ASSERT_GE(rep.size(), 2u);
  EXPECT_EQ(rep[1], 2);
}

TEST(EgressProxy, ConnectionCapRefusesAndReportsALimit) {
  Upstream echo(true);
  EgressConfig config;
  config.max_connections = 2;
  Fixture f(config, {"allowed.test:*"});
  std::string connect = "CONNECT allowed.test:" + std::to_string(echo.port()) + " HTTP/1.1\r\n\r\n";
  auto a = connect_to(f.door);
  send_all(a.get(), connect);
  read_some(a.get(), 39);
  auto b = connect_to(f.door);
  send_all(b.get(), connect);
  read_some(b.get(), 39);
  auto c = connect_to(f.door);
  send_all(c.get(), connect);
  std::string answer = read_until_closed(c.get());
  EXPECT_TRUE(answer.starts_with("HTTP/1.1 429")) << answer;
  auto limits = f.recorder.wait_limits(1);
  ASSERT_EQ(limits.size(), 1u);
  EXPECT_EQ(limits[0], "s-1 egress_connections connection cap of 2 per session reached");
}

TEST(EgressProxy, BandwidthCapPacesTraffic) {
  Upstream echo(true);
  EgressConfig config;
  config.bandwidth_kbps = 400;  // 50 kB/s, both directions together
  Fixture f(config, {"allowed.test:*"});
  auto c = connect_to(f.door);
  send_all(c.get(), "CONNECT allowed.test:" + std::to_string(echo.port()) + " HTTP/1.1\r\n\r\n");
  read_some(c.get(), 39);
  std::string payload(20000, 'x');
  auto began = std::chrono::steady_clock::now();
  send_all(c.get(), payload);
  EXPECT_EQ(read_some(c.get(), payload.size()).size(), payload.size());
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  EXPECT_GE(s, 0.6);  // 40 kB through a 50 kB/s cap (the first chunk goes at once)
  auto limits = f.recorder.wait_limits(1);
  ASSERT_FALSE(limits.empty());
  EXPECT_NE(limits[0].find("egress_bandwidth"), std::string::npos);
}

// A sandbox that dials in a loop: past the burst its attempts are counted, not
// recorded one by one, and the counts arrive as one summary when the door closes.
TEST(EgressProxy, AttemptsPastTheRecordRateAreCountedInOneSummary) {
  EgressConfig config;
  config.records_per_second = 0.001;  // no refill within the test
  config.record_burst = 5;
  Fixture f(config);
  for (int i = 0; i < 40; ++i) {
    auto c = connect_to(f.door);
    send_all(c.get(), "CONNECT api.evil.com:443 HTTP/1.1\r\n\r\n");
    EXPECT_TRUE(read_until_closed(c.get()).starts_with("HTTP/1.1 403"));
  }
  EXPECT_EQ(f.recorder.wait_attempts(5).size(), 5u);
  f.proxy->close_door("s-1");
  auto u = f.recorder.wait_unrecorded(1);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].first, "s-1 t-1");
  EXPECT_EQ(u[0].second.denied, 35u);
  EXPECT_EQ(u[0].second.allowed, 0u);
  EXPECT_LE(u[0].second.first_ms, u[0].second.last_ms);
  EXPECT_EQ(f.recorder.attempt_count(), 5u);
}

// Once the bucket has tokens again, the next recorded attempt is preceded by the
// summary of those it skipped.
TEST(EgressProxy, RecordsResumeAfterASummaryOnceTheRateAllows) {
  EgressConfig config;
  config.records_per_second = 20;
  config.record_burst = 2;
  Fixture f(config);
  auto refuse = [&] {
    auto c = connect_to(f.door);
    send_all(c.get(), "CONNECT api.evil.com:443 HTTP/1.1\r\n\r\n");
    read_until_closed(c.get());
  };
  for (int i = 0; i < 6; ++i) refuse();
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  refuse();
  auto u = f.recorder.wait_unrecorded(1);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_GE(u[0].second.denied, 1u);
  // Every attempt is either listed or counted in the summary, none twice.
  size_t listed = 7 - u[0].second.denied;
  EXPECT_EQ(f.recorder.wait_attempts(listed).size(), listed);
}

TEST(EgressProxy, ClosingTheDoorEndsItsConnections) {
  Upstream echo(true);
  Fixture f({}, {"allowed.test:*"});
  auto c = connect_to(f.door);
  send_all(c.get(), "CONNECT allowed.test:" + std::to_string(echo.port()) + " HTTP/1.1\r\n\r\n");
  read_some(c.get(), 39);
  f.proxy->close_door("s-1");
  EXPECT_EQ(read_until_closed(c.get()), "");
}

}  // namespace
}  // namespace cela::net
