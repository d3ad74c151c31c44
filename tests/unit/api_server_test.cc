// The HTTP layer (src/api/) against real sockets: a server on 127.0.0.1:0 and on a unix
// socket in a temporary directory, driven by a raw-socket client whose responses are
// parsed by Beast's response parser (so chunked bodies and SSE streams can be read
// incrementally, with timeouts).
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "api/http_error.h"
#include "api/json_body.h"
#include "api/request.h"
#include "api/responder.h"
#include "api/router.h"
#include "api/server.h"
#include "api/stream.h"

using namespace cela;
using namespace cela::api;
using namespace std::chrono_literals;
namespace json = boost::json;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kKey = "test-key-1";

// ---- a raw HTTP client with timeouts

struct HttpResponse {
  int status = 0;
  http::fields headers;
  std::string body;

  std::string header(std::string_view name) const {
    auto it = headers.find(name);
    return it == headers.end() ? std::string() : std::string(it->value());
  }
  json::object json_body() const { return json::parse(body).as_object(); }
  json::object error() const { return json_body().at("error").as_object(); }
};

class TestClient {
 public:
  static TestClient tcp(std::uint16_t port, int rcvbuf = 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
    return connected(fd, port);
  }
  // From a chosen loopback source address (127.0.0.0/8 is all local): another peer.
  static TestClient tcp_from(std::uint16_t port, const char* source) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, source, &local.sin_addr);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local), 0) << strerror(errno);
    return connected(fd, port);
  }
  // Connects the TCP socket `fd` to the server on 127.0.0.1:port.
  static TestClient connected(int fd, std::uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
    return TestClient(fd);
  }
  static TestClient unix_socket(const std::string& path) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << strerror(errno);
    return TestClient(fd);
  }

  explicit TestClient(int fd) : fd_(fd) {}
  TestClient(TestClient&& other) noexcept
      : fd_(std::exchange(other.fd_, -1)), pending_(std::move(other.pending_)) {}
  ~TestClient() { close(); }

  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // Starts reading a new response; returns once its header is complete.
  bool read_header(std::chrono::milliseconds timeout = 5s) {
    parser_.emplace();
    parser_->eager(true);
    parser_->body_limit(boost::none);
    return pump(timeout, [&] { return parser_->is_header_done(); });
  }
  // The body received so far of the response being read (chunked framing removed).
  const std::string& body_so_far() const { return parser_->get().body(); }
  bool response_done() const { return parser_->is_done(); }
  // Reads until `done()` holds for the response being read.
  bool read_until(const std::function<bool()>& done, std::chrono::milliseconds timeout = 5s) {
    return pump(timeout, done);
  }

  std::optional<HttpResponse> read_response(std::chrono::milliseconds timeout = 5s) {
    if (!read_header(timeout)) return std::nullopt;
    if (!pump(timeout, [&] { return parser_->is_done(); })) return std::nullopt;
    HttpResponse response;
    response.status = static_cast<int>(parser_->get().result_int());
    response.headers = static_cast<const http::fields&>(parser_->get());
    response.body = parser_->get().body();
    return response;
  }

  // True when the server closes the connection (EOF or reset) within `timeout`;
  // whatever it still sends first is dropped.
  bool wait_closed(std::chrono::milliseconds timeout) { return read_until_closed(timeout).has_value(); }

  // Everything the server still sends until it closes (nullopt if it does not within
  // `timeout`), including bytes already received past the last response read.
  std::optional<std::string> read_until_closed(std::chrono::milliseconds timeout) {
    std::string rest = std::exchange(pending_, {});
    auto deadline = Clock::now() + timeout;
    char buf[65536];
    while (Clock::now() < deadline) {
      int ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, ms) <= 0) return std::nullopt;
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return rest;
      rest.append(buf, static_cast<size_t>(n));
    }
    return std::nullopt;
  }

  int fd() const { return fd_; }

 private:
  // Feeds received bytes to the parser until `done()` or the timeout.
  bool pump(std::chrono::milliseconds timeout, const std::function<bool()>& done) {
    auto deadline = Clock::now() + timeout;
    while (!done()) {
      if (!pending_.empty()) {
        boost::system::error_code ec;
        std::size_t used = parser_->put(boost::asio::buffer(pending_), ec);
        pending_.erase(0, used);
        if (ec && ec != http::error::need_more) return false;
        if (used > 0) continue;  // progress: check done() before waiting for more
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[65536];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        boost::system::error_code ec;
        parser_->put_eof(ec);
        return !ec && done();
      }
      pending_.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }

  int fd_ = -1;
  std::string pending_;
  std::optional<http::response_parser<http::string_body>> parser_;
};

std::string request_text(std::string_view method, std::string_view target,
                         std::string_view body = {}, std::string_view extra_headers = {},
                         bool with_key = true) {
  std::string text = std::string(method) + " " + std::string(target) + " HTTP/1.1\r\nHost: t\r\n";
  if (with_key) text += "Authorization: Bearer " + std::string(kKey) + "\r\n";
  if (!body.empty()) text += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  text += std::string(extra_headers);
  text += "\r\n";
  text += std::string(body);
  return text;
}

// ---- a server per test

class ApiServer : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cela-api-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    config_.unix_socket_path = dir_ + "/api.sock";
    config_.tcp_host = "127.0.0.1";
    config_.tcp_port = 0;
    config_.io_threads = 2;
    config_.blocking_threads = 2;
    config_.log = [this](std::string_view line) {
      std::lock_guard lock(log_mu_);
      log_ += std::string(line) + "\n";
    };
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Starts the server with the routes registered by `add_routes`.
  void start(const std::function<void(Router&, HttpServer&)>& add_routes) {
    server_ = std::make_unique<HttpServer>(config_);
    server_->set_authenticator([](const Request& req) -> std::expected<Principal, ApiError> {
      if (req.transport == Transport::unix_socket && req.peer) {
        return Principal{"local-uid-" + std::to_string(req.peer->uid), req.peer->uid == 0, ""};
      }
      auto key = bearer_token(req);
      if (key && *key == kKey) return Principal{"t-1", false, "k-1"};
      return std::unexpected(ApiError::unauthorized());
    });
    add_routes(server_->router(), *server_);
    auto started = server_->start();
    ASSERT_TRUE(started.has_value()) << started.error().message();
    port_ = server_->tcp_port();
    ASSERT_NE(port_, 0);
  }

  TestClient client(int rcvbuf = 0) { return TestClient::tcp(port_, rcvbuf); }

  std::optional<HttpResponse> call(std::string_view method, std::string_view target,
                                   std::string_view body = {}, std::string_view headers = {},
                                   bool with_key = true) {
    TestClient c = client();
    c.send(request_text(method, target, body, headers, with_key));
    return c.read_response();
  }

  std::string log() {
    std::lock_guard lock(log_mu_);
    return log_;
  }

  std::string dir_;
  ServerConfig config_;
  std::unique_ptr<HttpServer> server_;
  std::uint16_t port_ = 0;
  std::mutex log_mu_;
  std::string log_;
};

void add_echo(Router& router) {
  router.add(http::verb::post, "/v1/echo", {}, [](Request& req, Responder& res) {
    auto body = parse_json_object(req.body);
    if (!body) return res.error(body.error());
    JsonFields fields(*body);
    auto limits = fields.object("limits");
    if (!limits) return res.error(limits.error());
    if (*limits) {
      auto memory = (*limits)->integer("memory_mb");
      if (!memory) return res.error(memory.error());
    }
    res.json(200, json::object{{"size", req.body.size()}, {"body", *body}});
  });
}

bool is_request_id(std::string_view id) {
  return id.size() == 18 && id.starts_with("r-") &&
         id.find_first_not_of("0123456789abcdef", 2) == std::string_view::npos;
}

}  // namespace

// ---- routing and request decoding

TEST_F(ApiServer, RouteCapturesAndQueryDecoding) {
  start([](Router& router, HttpServer&) {
    router.add(http::verb::get, "/v1/sessions/{id}/execs/{eid}", {}, [](Request& req, Responder& res) {
      json::array xs;
      for (auto x : req.query_values("x")) xs.emplace_back(x);
      auto follow = req.query_flag("follow");
      res.json(200, json::object{{"id", req.param("id")},
                                 {"eid", req.param("eid")},
                                 {"path", req.query_value("path").value_or("?")},
                                 {"follow", follow.value_or(false)},
                                 {"xs", xs},
                                 {"tenant", req.principal ? req.principal->tenant_id : ""}});
    });
  });
  auto r = call("GET", "/v1/sessions/s-1/execs/e%2F2?path=%2Fhome%2Fa+b%2B&follow=1&x=1&x=2");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->header("Content-Type"), "application/json");
  auto body = r->json_body();
  EXPECT_EQ(body.at("id").as_string(), "s-1");
  EXPECT_EQ(body.at("eid").as_string(), "e/2");  // %2F stays inside its segment
  EXPECT_EQ(body.at("path").as_string(), "/home/a b+");
  EXPECT_EQ(body.at("follow").as_bool(), true);
  EXPECT_EQ(body.at("xs"), (json::array{"1", "2"}));
  EXPECT_EQ(body.at("tenant").as_string(), "t-1");

  // A trailing slash names the same resource.
  auto slash = call("GET", "/v1/sessions/s-1/execs/e-3/");
  ASSERT_TRUE(slash);
  EXPECT_EQ(slash->status, 200);
  EXPECT_EQ(slash->json_body().at("eid").as_string(), "e-3");
}

TEST_F(ApiServer, UnknownPathIs404AndWrongMethodIs405WithJsonErrors) {
  start([](Router& router, HttpServer&) {
    router.add(http::verb::get, "/v1/things/{id}", {},
               [](Request&, Responder& res) { res.json(200, json::object{}); });
    router.add(http::verb::delete_, "/v1/things/{id}", {},
               [](Request&, Responder& res) { res.no_content(); });
  });
  auto missing = call("GET", "/v1/nothing-here");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  auto e = missing->error();
  EXPECT_EQ(e.at("code").as_string(), "not_found");
  EXPECT_EQ(e.at("category").as_string(), "user");
  EXPECT_TRUE(e.at("session_id").is_null());
  EXPECT_TRUE(e.at("exec_id").is_null());
  EXPECT_TRUE(e.at("retry_after_s").is_null());
  EXPECT_EQ(e.at("retryable").as_bool(), false);
  EXPECT_TRUE(is_request_id(e.at("request_id").as_string()));
  EXPECT_EQ(missing->header("X-Request-Id"), std::string(e.at("request_id").as_string()));

  auto wrong = call("PUT", "/v1/things/7");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->error().at("code").as_string(), "method_not_allowed");
  EXPECT_EQ(wrong->header("Allow"), "GET, DELETE");

  auto deleted = call("DELETE", "/v1/things/7");
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 204);
  EXPECT_TRUE(deleted->body.empty());
  EXPECT_EQ(deleted->header("Content-Length"), "");
}

TEST_F(ApiServer, MalformedJsonIs400InvalidRequest) {
  start([](Router& router, HttpServer&) { add_echo(router); });
  for (std::string bad : {"{\"a\": ", "[1, 2]", "{\"a\": 1,}", "{\"a\": 1} // comment"}) {
    auto r = call("POST", "/v1/echo", bad);
    ASSERT_TRUE(r) << bad;
    EXPECT_EQ(r->status, 400) << bad;
    EXPECT_EQ(r->error().at("code").as_string(), "invalid_request") << bad;
    EXPECT_TRUE(std::string(r->error().at("request_id").as_string()).starts_with("r-"));
  }
  auto typed = call("POST", "/v1/echo", R"({"limits": {"memory_mb": "lots"}})");
  ASSERT_TRUE(typed);
  EXPECT_EQ(typed->status, 400);
  EXPECT_EQ(typed->error().at("message").as_string(),
            "field `limits.memory_mb` must be an integer");

  auto good = call("POST", "/v1/echo", R"({"limits": {"memory_mb": 512}})");
  ASSERT_TRUE(good);
  EXPECT_EQ(good->status, 200);
}

// ---- limits

TEST_F(ApiServer, BodyOverLimitIs413AndServerKeepsServing) {
  config_.body_limit = 1024;
  start([](Router& router, HttpServer&) {
    add_echo(router);
    router.add(
        http::verb::put, "/v1/upload", {},
        [](Request& req, Responder& res) {
          res.json(201, json::object{{"size", req.body.size()}});
        },
        RouteOptions().with_body_limit(64 * 1024));
  });
  std::string big = "{\"pad\": \"" + std::string(4096, 'x') + "\"}";

  // Declared too large: refused from the header, before the body is read.
  auto declared = call("POST", "/v1/echo", big);
  ASSERT_TRUE(declared);
  EXPECT_EQ(declared->status, 413);
  EXPECT_EQ(declared->error().at("code").as_string(), "payload_too_large");

  // Chunked, no declared size: refused once the limit is passed.
  {
    TestClient c = client();
    std::string head =
        "POST /v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer test-key-1\r\n"
        "Transfer-Encoding: chunked\r\n\r\n";
    std::string chunk = "800\r\n" + std::string(0x800, 'y') + "\r\n";
    c.send(head + chunk + chunk);
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    EXPECT_EQ(r->header("Connection"), "close");
    EXPECT_TRUE(c.wait_closed(3s));
  }

  // The per-route limit lets the upload through; the server still serves.
  auto upload = call("PUT", "/v1/upload", std::string(4096, 'z'));
  ASSERT_TRUE(upload);
  EXPECT_EQ(upload->status, 201);
  EXPECT_EQ(upload->json_body().at("size").as_int64(), 4096);
  auto small = call("POST", "/v1/echo", "{}");
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 200);
}

TEST_F(ApiServer, ChunkedRequestBodyIsReassembled) {
  start([](Router& router, HttpServer&) { add_echo(router); });
  TestClient c = client();
  c.send(
      "POST /v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer test-key-1\r\n"
      "Transfer-Encoding: chunked\r\n\r\n"
      "5\r\n{\"a\":\r\n"
      "4\r\n 12,\r\n"
      "8\r\n \"b\": 3}\r\n"
      "0\r\n\r\n");
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->json_body().at("body"), (json::object{{"a", 12}, {"b", 3}}));
}

// A coding other than a sole `chunked` would leave Beast reading "no body" (identity) and
// the bytes after the header as a second request: 400, and the connection closes unread.
TEST_F(ApiServer, AmbiguousFramingIs400AndTheRestIsNeverParsed) {
  start([](Router& router, HttpServer&) { add_echo(router); });
  for (const char* coding : {"identity", "chunked, identity", "gzip, chunked"}) {
    TestClient c = client();
    c.send(std::string("POST /v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer test-key-1\r\n") +
           "Transfer-Encoding: " + coding + "\r\n\r\n0\r\n\r\n" +
           "POST /v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer test-key-1\r\n"
           "Content-Length: 2\r\n\r\n{}");
    auto r = c.read_response();
    ASSERT_TRUE(r) << coding;
    EXPECT_EQ(r->status, 400) << coding;
    EXPECT_EQ(r->error().at("code").as_string(), "invalid_request");
    EXPECT_EQ(r->header("Connection"), "close");
    auto rest = c.read_until_closed(3s);
    ASSERT_TRUE(rest) << coding;
    EXPECT_EQ(*rest, "") << coding;  // no answer to the smuggled request
  }
}

TEST_F(ApiServer, ExpectContinueIsAnsweredOnlyForAcceptableUploads) {
  config_.body_limit = 1024;
  start([](Router& router, HttpServer&) { add_echo(router); });
  {
    TestClient c = client();
    c.send(
        "POST /v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer test-key-1\r\n"
        "Content-Length: 2\r\nExpect: 100-continue\r\n\r\n");
    auto go_on = c.read_response();
    ASSERT_TRUE(go_on);
    EXPECT_EQ(go_on->status, 100);
    c.send("{}");
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
  {
    TestClient c = client();
    c.send(
        "POST /v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer test-key-1\r\n"
        "Content-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
    auto r = c.read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
  }
}

TEST_F(ApiServer, KeepAliveServesTwoRequestsOnOneConnection) {
  std::mutex mu;
  std::vector<std::string> access;
  config_.access_log = [&](const AccessRecord& r) {
    std::lock_guard lock(mu);
    access.push_back(std::string(r.method) + " " + std::string(r.path) + " " +
                     std::to_string(r.status) + " " + std::string(r.tenant_id));
  };
  start([](Router& router, HttpServer&) { add_echo(router); });
  TestClient c = client();
  c.send(request_text("POST", "/v1/echo", R"({"n": 1})"));
  auto first = c.read_response();
  c.send(request_text("POST", "/v1/echo", R"({"n": 2})"));
  auto second = c.read_response();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->json_body().at("body").at("n").as_int64(), 1);
  EXPECT_EQ(second->json_body().at("body").at("n").as_int64(), 2);
  EXPECT_NE(first->header("X-Request-Id"), second->header("X-Request-Id"));
  EXPECT_EQ(server_->open_connections(), 1u);
  // Records are written once the answer has left, which may be just after the client read it.
  auto deadline = Clock::now() + 2s;
  for (bool done = false; !done && Clock::now() < deadline;) {
    {
      std::lock_guard lock(mu);
      done = access.size() >= 2;
    }
    std::this_thread::sleep_for(5ms);
  }
  std::lock_guard lock(mu);
  EXPECT_EQ(access, (std::vector<std::string>{"POST /v1/echo 200 t-1", "POST /v1/echo 200 t-1"}));
}

TEST_F(ApiServer, IdleKeepAliveConnectionIsClosed) {
  config_.idle_timeout = 300ms;
  start([](Router& router, HttpServer&) { add_echo(router); });
  TestClient c = client();
  c.send(request_text("POST", "/v1/echo", "{}"));
  ASSERT_TRUE(c.read_response());
  auto answered = Clock::now();
  EXPECT_TRUE(c.wait_closed(3s));
  EXPECT_GE(Clock::now() - answered, 250ms);
}

TEST_F(ApiServer, OversizeHeaderIs400AndClosed) {
  config_.header_limit = 4096;
  start([](Router& router, HttpServer&) { add_echo(router); });
  TestClient c = client();
  c.send(request_text("POST", "/v1/echo", "{}", "X-Pad: " + std::string(8192, 'p') + "\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(r->error().at("code").as_string(), "invalid_request");
  EXPECT_TRUE(c.wait_closed(3s));
}

TEST_F(ApiServer, SlowHeaderClientIsClosedWhileOthersAreServed) {
  config_.header_timeout = 300ms;
  start([](Router& router, HttpServer&) { add_echo(router); });
  TestClient slow = client();
  ASSERT_TRUE(slow.send("POST /v1/echo HTTP/1.1\r\nHost: t\r\nContent-"));
  auto started = Clock::now();

  // Meanwhile another client is served normally.
  auto r = call("POST", "/v1/echo", "{}");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_LT(Clock::now() - started, 250ms);

  EXPECT_TRUE(slow.wait_closed(3s));
  EXPECT_GE(Clock::now() - started, 250ms);

  // A connection that sends nothing at all is closed too.
  TestClient silent = client();
  EXPECT_TRUE(silent.wait_closed(3s));
}

TEST_F(ApiServer, SlowBodyIsAnswered408) {
  config_.body_timeout = 300ms;
  start([](Router& router, HttpServer&) { add_echo(router); });
  TestClient c = client();
  c.send(
      "POST /v1/echo HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer test-key-1\r\n"
      "Content-Length: 100\r\n\r\n{\"a\": ");
  auto r = c.read_response(3s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408);
  EXPECT_EQ(r->error().at("code").as_string(), "request_timeout");
  EXPECT_TRUE(c.wait_closed(3s));
}

TEST_F(ApiServer, MaxConnectionsAnswers503CapacityExceeded) {
  config_.slots = {.total = 3, .root_reserve = 1, .per_peer = 3, .per_key = 3};  // 2 for TCP
  start([](Router& router, HttpServer&) { add_echo(router); });
  std::vector<TestClient> held;
  for (int i = 0; i < 2; ++i) {
    held.push_back(client());
    held.back().send(request_text("POST", "/v1/echo", "{}"));
    ASSERT_TRUE(held.back().read_response());
  }
  auto over = call("POST", "/v1/echo", "{}");
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 503);
  EXPECT_EQ(over->header("Retry-After"), "1");
  auto e = over->error();
  EXPECT_EQ(e.at("code").as_string(), "capacity_exceeded");
  EXPECT_EQ(e.at("category").as_string(), "platform");
  EXPECT_EQ(e.at("retryable").as_bool(), true);
  EXPECT_EQ(e.at("retry_after_s").as_int64(), 1);

  // A slot frees when a client leaves.
  held.pop_back();
  auto deadline = Clock::now() + 3s;
  while (server_->open_connections() > 1 && Clock::now() < deadline)
    std::this_thread::sleep_for(10ms);
  auto again = call("POST", "/v1/echo", "{}");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

TEST_F(ApiServer, OnePeerCannotLockAnotherOut) {
  config_.slots = {.total = 64, .root_reserve = 4, .per_peer = 8, .per_key = 64};
  start([](Router& router, HttpServer&) { add_echo(router); });
  // 8 idle connections from 127.0.0.1 take its share; more from it are answered 429.
  std::vector<TestClient> idle;
  for (int i = 0; i < 8; ++i) idle.push_back(TestClient::tcp_from(port_, "127.0.0.1"));
  auto deadline = Clock::now() + 3s;
  while (server_->open_connections() < 8 && Clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  ASSERT_EQ(server_->open_connections(), 8u);
  TestClient over = TestClient::tcp_from(port_, "127.0.0.1");
  over.send(request_text("POST", "/v1/echo", "{}"));
  auto refused = over.read_response();
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);
  EXPECT_EQ(refused->header("Retry-After"), "1");
  EXPECT_EQ(refused->error().at("code").as_string(), "rate_limited");
  EXPECT_EQ(refused->error().at("retryable").as_bool(), true);
  EXPECT_TRUE(over.wait_closed(3s));

  // Another address is served at once.
  auto started = Clock::now();
  TestClient other = TestClient::tcp_from(port_, "127.0.0.2");
  other.send(request_text("POST", "/v1/echo", "{}"));
  auto served = other.read_response();
  ASSERT_TRUE(served);
  EXPECT_EQ(served->status, 200);
  EXPECT_LT(Clock::now() - started, 500ms);
}

TEST_F(ApiServer, RefusalsPastTheLingeringBoundAreStillAnswered) {
  config_.slots = {.total = 512, .root_reserve = 4, .per_peer = 1, .per_key = 64};
  start([](Router& router, HttpServer&) { add_echo(router); });
  TestClient first = TestClient::tcp_from(port_, "127.0.0.3");
  auto deadline = Clock::now() + 3s;
  while (server_->open_connections() < 1 && Clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  // Refused clients that stay connected keep their refusal lingering; past kMaxRejecting
  // of them the answer is written at once. Every one gets the JSON error.
  std::vector<TestClient> refused;
  for (std::size_t i = 0; i < kMaxRejecting + 40; ++i) {
    refused.push_back(TestClient::tcp_from(port_, "127.0.0.3"));
    refused.back().send(request_text("POST", "/v1/echo", "{}"));
  }
  for (std::size_t i = 0; i < refused.size(); ++i) {
    auto r = refused[i].read_response(3s);
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 429) << i;
    EXPECT_EQ(r->error().at("code").as_string(), "rate_limited") << i;
  }
}

TEST_F(ApiServer, LocalRootHasItsReserveWhenTcpIsFull) {
  config_.slots = {.total = 6, .root_reserve = 2, .per_peer = 6, .per_key = 6};
  start([](Router& router, HttpServer&) {
    add_echo(router);
    router.add(http::verb::get, "/v1/whoami", {}, [](Request& req, Responder& res) {
      res.json(200, json::object{{"admin", req.principal->admin}});
    });
  });
  std::vector<TestClient> held;
  for (int i = 0; i < 4; ++i) held.push_back(client());
  auto deadline = Clock::now() + 3s;
  while (server_->open_connections() < 4 && Clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  auto full = call("POST", "/v1/echo", "{}");
  ASSERT_TRUE(full);
  EXPECT_EQ(full->status, 503);
  EXPECT_EQ(full->error().at("code").as_string(), "capacity_exceeded");
  if (getuid() != 0) GTEST_SKIP() << "the reserve is for uid 0";
  for (int i = 0; i < 2; ++i) {
    TestClient local = TestClient::unix_socket(config_.unix_socket_path);
    local.send(request_text("GET", "/v1/whoami", {}, {}, false));
    auto r = local.read_response();
    ASSERT_TRUE(r) << i;
    EXPECT_EQ(r->status, 200) << i;
    held.push_back(std::move(local));  // kept open: both reserve slots are in use
  }
}

TEST_F(ApiServer, AtTheDescriptorLimitClientsGet503AndAcceptResumes) {
  start([](Router& router, HttpServer&) { add_echo(router); });
  // The client sockets exist before the limit drops: connect() needs no new descriptor,
  // the server's accept() does.
  std::vector<int> sockets;
  for (int i = 0; i < 3; ++i) sockets.push_back(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &saved), 0);
  int lowest_free = dup(0);
  ASSERT_GE(lowest_free, 0);
  ::close(lowest_free);
  rlimit low{static_cast<rlim_t>(lowest_free), saved.rlim_max};
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<TestClient> clients;
  for (int fd : sockets) {
    clients.push_back(TestClient::connected(fd, port_));
    clients.back().send(request_text("POST", "/v1/echo", "{}"));
  }
  std::vector<std::optional<HttpResponse>> answers;
  for (auto& c : clients) answers.push_back(c.read_response(3s));
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &saved), 0);
  for (auto& r : answers) {
    ASSERT_TRUE(r);  // answered, not left waiting in the backlog
    EXPECT_EQ(r->status, 503);
    EXPECT_EQ(r->error().at("code").as_string(), "capacity_exceeded");
    EXPECT_NE(r->error().at("message").as_string().find("file descriptors"), std::string::npos);
  }
  // Descriptors are back: accepting resumes by itself, and the episode was logged once.
  std::optional<HttpResponse> again;
  auto deadline = Clock::now() + 3s;
  while (Clock::now() < deadline) {
    again = call("POST", "/v1/echo", "{}");
    if (again && again->status == 200) break;
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  // The unix listener may have met the limit too (accept() takes its descriptor before
  // it looks for a connection); a connection there ends its episode.
  TestClient local = TestClient::unix_socket(config_.unix_socket_path);
  local.send(request_text("POST", "/v1/echo", "{}"));
  ASSERT_TRUE(local.read_response());
  std::string text = log();
  auto count = [&](std::string_view needle) {
    std::size_t n = 0;
    for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  };
  std::string tcp = "accept on 127.0.0.1:" + std::to_string(port_) + ": ";
  EXPECT_EQ(count(tcp + "Too many open files; answering 503 and retrying"), 1u) << text;
  EXPECT_EQ(count(tcp + "accepting again (3 connection(s) answered 503"), 1u) << text;
  EXPECT_EQ(count("accepting again"), count("answering 503 and retrying")) << text;
}

// ---- failures inside handlers

TEST_F(ApiServer, HandlerExceptionIs500InternalWithBody) {
  start([](Router& router, HttpServer&) {
    router.add(http::verb::get, "/v1/throws", {}, [](Request&, Responder&) {
      throw std::runtime_error("secret detail /var/lib/cela");
    });
    router.add(http::verb::get, "/v1/forgets", {}, [](Request&, Responder&) {});
  });
  auto r = call("GET", "/v1/throws");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  auto e = r->error();
  EXPECT_EQ(e.at("code").as_string(), "internal");
  EXPECT_EQ(e.at("category").as_string(), "platform");
  EXPECT_EQ(e.at("message").as_string(), "internal error");  // the detail is logged, not sent
  std::string id(e.at("request_id").as_string());
  EXPECT_TRUE(is_request_id(id));
  EXPECT_NE(log().find(id), std::string::npos);
  EXPECT_NE(log().find("secret detail"), std::string::npos);

  auto forgot = call("GET", "/v1/forgets");
  ASSERT_TRUE(forgot);
  EXPECT_EQ(forgot->status, 500);
  EXPECT_EQ(forgot->error().at("code").as_string(), "internal");
}

TEST_F(ApiServer, DeferredResponseFromAnotherThread) {
  std::atomic<bool> handler_returned{false};
  start([&](Router& router, HttpServer& server) {
    router.add(http::verb::post, "/v1/slow", {}, [&](Request&, Responder& res) {
      server.post_blocking([r = res.shared_from_this(), &handler_returned] {
        std::this_thread::sleep_for(100ms);
        EXPECT_TRUE(handler_returned.load());
        r->json(201, json::object{{"path", r->request().path}});
      });
      handler_returned = true;
    });
  });
  auto r = call("POST", "/v1/slow");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->json_body().at("path").as_string(), "/v1/slow");
}

// ---- authentication

TEST_F(ApiServer, TcpNeedsAKeyAndUnixSocketPassesPeerCredentials) {
  start([](Router& router, HttpServer&) {
    router.add(http::verb::get, "/v1/whoami", {}, [](Request& req, Responder& res) {
      res.json(200, json::object{
                        {"tenant", req.principal->tenant_id},
                        {"admin", req.principal->admin},
                        {"unix", req.transport == Transport::unix_socket},
                        {"uid", req.peer ? static_cast<std::int64_t>(req.peer->uid) : -1},
                    });
    });
    router.add(
        http::verb::get, "/healthz", {},
        [](Request& req, Responder& res) {
          res.raw(200, "text/plain", req.principal ? "?" : "ok");
        },
        RouteOptions().make_public());
  });
  auto none = call("GET", "/v1/whoami", {}, {}, false);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(none->error().at("code").as_string(), "unauthorized");
  EXPECT_EQ(none->header("WWW-Authenticate"), "Bearer");

  auto wrong = call("GET", "/v1/whoami", {}, "Authorization: Bearer nope\r\n", false);
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);

  auto keyed = call("GET", "/v1/whoami");
  ASSERT_TRUE(keyed);
  EXPECT_EQ(keyed->status, 200);
  EXPECT_EQ(keyed->json_body().at("tenant").as_string(), "t-1");
  EXPECT_EQ(keyed->json_body().at("unix").as_bool(), false);

  auto health = call("GET", "/healthz", {}, {}, false);
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok");

  TestClient local = TestClient::unix_socket(config_.unix_socket_path);
  local.send(request_text("GET", "/v1/whoami", {}, {}, false));
  auto r = local.read_response();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  auto body = r->json_body();
  EXPECT_EQ(body.at("unix").as_bool(), true);
  EXPECT_EQ(body.at("uid").as_int64(), static_cast<std::int64_t>(getuid()));
  EXPECT_EQ(body.at("admin").as_bool(), getuid() == 0);

  // The socket file is private to the daemon's user.
  auto perms = std::filesystem::status(config_.unix_socket_path).permissions();
  EXPECT_EQ(perms, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST_F(ApiServer, StaleUnixSocketIsReplacedButALiveOneIsNot) {
  start([](Router&, HttpServer&) {});
  // A second server on the same path while the first is alive: refused.
  ServerConfig second = config_;
  second.tcp_host.clear();
  {
    HttpServer other(second);
    auto started = other.start();
    ASSERT_FALSE(started.has_value());
    EXPECT_EQ(started.error().err, EADDRINUSE);
  }
  // Leave a stale socket file behind (bound, never listening), then start over it.
  server_.reset();
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, second.unix_socket_path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ::close(fd);
  HttpServer replacement(second);
  ASSERT_TRUE(replacement.start().has_value());
}

// ---- streams

// Shares the stream a handler opened with the test thread.
struct StreamSlot {
  std::promise<std::shared_ptr<SseStream>> stream;
  std::promise<std::string> last_event_id;
};

TEST_F(ApiServer, RequestsInFlightArePerKeyAndStreamsCount) {
  config_.slots = {.total = 64, .root_reserve = 4, .per_peer = 64, .per_key = 2};
  auto slot = std::make_shared<StreamSlot>();
  auto parked = std::make_shared<std::promise<std::shared_ptr<Responder>>>();
  start([slot, parked](Router& router, HttpServer&) {
    add_echo(router);
    router.add(http::verb::get, "/v1/events", {},
               [slot](Request&, Responder& res) { slot->stream.set_value(res.start_sse()); });
    router.add(http::verb::post, "/v1/park", {}, [parked](Request&, Responder& res) {
      parked->set_value(res.shared_from_this());  // answered later by the test
    });
  });
  // One open stream and one request waiting for its answer: the key's two slots.
  TestClient sse = client();
  sse.send(request_text("GET", "/v1/events"));
  ASSERT_TRUE(sse.read_header());
  auto stream = slot->stream.get_future().get();
  TestClient waiting = client();
  waiting.send(request_text("POST", "/v1/park"));
  auto responder = parked->get_future().get();

  TestClient over = client();
  over.send(request_text("POST", "/v1/echo", "{}"));
  auto third = over.read_response();
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 429);
  EXPECT_EQ(third->error().at("code").as_string(), "rate_limited");
  EXPECT_EQ(third->header("Retry-After"), "1");
  EXPECT_TRUE(over.wait_closed(3s));  // and its connection is given back
  // Idle connections of the key hold no slot; a request without the key is not counted.
  auto unkeyed = call("POST", "/v1/echo", "{}", {}, false);
  ASSERT_TRUE(unkeyed);
  EXPECT_EQ(unkeyed->status, 401);

  // The parked answer frees one slot, the stream's end the other.
  responder->json(200, json::object{});
  responder.reset();
  ASSERT_TRUE(waiting.read_response());
  auto after_answer = call("POST", "/v1/echo", "{}");
  ASSERT_TRUE(after_answer);
  EXPECT_EQ(after_answer->status, 200);
  stream->close();
  stream.reset();
  ASSERT_TRUE(sse.wait_closed(3s));
  // Both slots free again: two requests in flight at once on keep-alive connections.
  TestClient a = client();
  TestClient b = client();
  for (TestClient* c : {&a, &b}) {
    c->send(request_text("POST", "/v1/echo", "{}"));
    auto r = c->read_response();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
}

TEST_F(ApiServer, SseEventsArriveIncrementallyWithIds) {
  auto slot = std::make_shared<StreamSlot>();
  start([slot](Router& router, HttpServer&) {
    router.add(http::verb::get, "/v1/events", {}, [slot](Request& req, Responder& res) {
      auto offset = last_event_offset(req);
      slot->last_event_id.set_value(std::string(last_event_id(req).value_or("")) + "/" +
                                    std::to_string(offset && *offset ? **offset : 0));
      slot->stream.set_value(res.start_sse());
    });
  });
  TestClient c = client();
  c.send(request_text("GET", "/v1/events", {}, "Last-Event-ID: 42\r\n"));
  ASSERT_TRUE(c.read_header());
  auto stream = slot->stream.get_future().get();
  EXPECT_EQ(slot->last_event_id.get_future().get(), "42/42");

  ASSERT_TRUE(stream->send("stdout", "43", "aGVsbG8="));
  ASSERT_TRUE(c.read_until([&] { return c.body_so_far().find("\n\n") != std::string::npos; }));
  EXPECT_EQ(c.body_so_far(), "event: stdout\nid: 43\ndata: aGVsbG8=\n\n");

  // The second event is produced only after the first one was read.
  ASSERT_TRUE(stream->send("exit", "50", "{\"a\":1}\n{\"b\":2}"));
  std::string both =
      "event: stdout\nid: 43\ndata: aGVsbG8=\n\n"
      "event: exit\nid: 50\ndata: {\"a\":1}\ndata: {\"b\":2}\n\n";
  ASSERT_TRUE(c.read_until([&] { return c.body_so_far().size() >= both.size(); }));
  EXPECT_EQ(c.body_so_far(), both);

  std::atomic<bool> closed_called{false};
  stream->on_close([&] { closed_called = true; });
  stream->close();
  ASSERT_TRUE(c.read_until([&] { return c.response_done(); }));  // the final chunk
  EXPECT_EQ(c.body_so_far(), both);
  EXPECT_TRUE(c.wait_closed(3s));
  auto deadline = Clock::now() + 2s;
  while (!closed_called && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(closed_called);
}

TEST_F(ApiServer, SseClientDisconnectIsObservedByTheProducer) {
  auto slot = std::make_shared<StreamSlot>();
  start([slot](Router& router, HttpServer&) {
    router.add(http::verb::get, "/v1/events", {},
               [slot](Request&, Responder& res) { slot->stream.set_value(res.start_sse()); });
  });
  TestClient c = client();
  c.send(request_text("GET", "/v1/events"));
  ASSERT_TRUE(c.read_header());
  auto stream = slot->stream.get_future().get();
  std::atomic<bool> closed_called{false};
  stream->on_close([&] { closed_called = true; });
  EXPECT_FALSE(stream->closed());

  c.close();
  // The producer is idle: only the server's watch on the socket can notice.
  auto deadline = Clock::now() + 3s;
  while (!stream->closed() && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(stream->closed());
  EXPECT_FALSE(stream->send("stdout", "1", "x"));
  while (!closed_called && Clock::now() < deadline) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(closed_called);
}

TEST_F(ApiServer, SseClientThatDoesNotReadIsCutOffWithBoundedMemory) {
  config_.stream_buffer_limit = 256 * 1024;
  auto slot = std::make_shared<StreamSlot>();
  start([slot](Router& router, HttpServer&) {
    router.add(http::verb::get, "/v1/events", {},
               [slot](Request&, Responder& res) { slot->stream.set_value(res.start_sse()); });
  });
  TestClient c = client(16 * 1024);  // a small receive buffer: the kernel holds little
  c.send(request_text("GET", "/v1/events"));
  ASSERT_TRUE(c.read_header());
  auto stream = slot->stream.get_future().get();

  // A steady producer (about 100 MB/s); the client never reads again.
  const std::string event(16 * 1024, 'x');
  std::size_t accepted = 0;
  bool refused = false;
  auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    if (!stream->send("stdout", std::to_string(accepted), event)) {
      refused = true;
      break;
    }
    accepted += event.size();
    std::this_thread::sleep_for(150us);
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(stream->closed());
  // What was accepted is the server's bounded queue plus what the kernel buffers hold
  // (server send buffer up to 4 MiB by tcp_wmem, the client's 16 KiB receive buffer).
  EXPECT_LT(accepted, 16u * 1024 * 1024);
  EXPECT_TRUE(c.wait_closed(5s));
}

TEST_F(ApiServer, SseClientThatReadsIsNotCutOff) {
  config_.stream_buffer_limit = 256 * 1024;
  auto slot = std::make_shared<StreamSlot>();
  start([slot](Router& router, HttpServer&) {
    router.add(http::verb::get, "/v1/events", {},
               [slot](Request&, Responder& res) { slot->stream.set_value(res.start_sse()); });
  });
  TestClient c = client(16 * 1024);
  c.send(request_text("GET", "/v1/events"));
  ASSERT_TRUE(c.read_header());
  auto stream = slot->stream.get_future().get();

  // Far more than the buffer limit goes through, because the client keeps up. The
  // producer waits for the queue to drain every few events (as a replay does), so a
  // loaded host that deschedules the client for a while cannot make this flaky.
  constexpr int kEvents = 256;
  const std::string event(16 * 1024, 'x');
  std::thread producer([&] {
    for (int i = 0; i < kEvents; ++i) {
      if (!stream->send("stdout", std::to_string(i), event)) return;
      if (i % 4 == 3) {
        auto drained = std::make_shared<std::promise<void>>();
        stream->on_drained(64 * 1024, [drained] { drained->set_value(); });
        if (drained->get_future().wait_for(10s) != std::future_status::ready) return;
      }
    }
    stream->close();
  });
  bool ended = c.read_until([&] { return c.response_done(); }, 20s);
  producer.join();
  EXPECT_TRUE(ended);
  EXPECT_GT(c.body_so_far().size(), kEvents * event.size());
}

TEST_F(ApiServer, ChunkedDownloadWithBlockingBackpressureThenKeepAlive) {
  config_.stream_buffer_limit = 256 * 1024;
  constexpr std::size_t kTotal = 3 * 1024 * 1024;
  start([](Router& router, HttpServer& server) {
    router.add(http::verb::get, "/v1/download", {}, [&server](Request&, Responder& res) {
      auto writer = res.start_chunked(200, "application/octet-stream");
      server.post_blocking([writer] {
        std::string chunk(64 * 1024, '\0');
        for (std::size_t sent = 0; sent < kTotal; sent += chunk.size()) {
          for (std::size_t i = 0; i < chunk.size(); ++i)
            chunk[i] = static_cast<char>((sent + i) % 251);
          if (!writer->write(chunk)) return;
        }
        writer->finish();
      });
    });
    add_echo(router);
  });
  TestClient c = client(16 * 1024);
  c.send(request_text("GET", "/v1/download"));
  ASSERT_TRUE(c.read_header());
  std::this_thread::sleep_for(200ms);  // the producer fills the buffer and must wait
  auto r = [&] {
    EXPECT_TRUE(c.read_until([&] { return c.body_so_far().size() >= kTotal; }, 10s));
    return c.body_so_far();
  }();
  ASSERT_EQ(r.size(), kTotal);
  bool intact = true;
  for (std::size_t i = 0; i < r.size(); ++i) intact = intact && r[i] == static_cast<char>(i % 251);
  EXPECT_TRUE(intact);

  // The body ends properly and the connection carries on with the next request.
  ASSERT_TRUE(c.read_until([&] { return c.response_done(); }));
  c.send(request_text("POST", "/v1/echo", "{}"));
  auto next = c.read_response();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200);
}

// ---- pieces without a server

TEST(ApiError, BodyHasTheDocumentedShape) {
  auto e =
      ApiError::capacity_exceeded("host is at its limit of 100 sessions", 2).with_session("s-1");
  json::object body = error_body(e, "r-0123456789abcdef");
  EXPECT_EQ(json::serialize(body),
            R"({"error":{"code":"capacity_exceeded","category":"platform",)"
            R"("message":"host is at its limit of 100 sessions","session_id":"s-1",)"
            R"("exec_id":null,"request_id":"r-0123456789abcdef","retryable":true,)"
            R"("retry_after_s":2}})");
  auto headers = error_headers(e);
  ASSERT_EQ(headers.size(), 1u);
  EXPECT_EQ(headers[0].first, "Retry-After");
  EXPECT_EQ(headers[0].second, "2");
  EXPECT_EQ(e.status, 503);
}

TEST(ApiError, InternalFailuresMapToStableCodes) {
  EXPECT_EQ(from_error(Error{ErrorCode::not_found, 0, "session s-9"}).status, 404);
  EXPECT_EQ(from_error(Error{ErrorCode::conflict, 0, "session is paused"}).code, "conflict");
  EXPECT_EQ(from_error(Error{ErrorCode::policy_denied, 0, "path not writable"}).category, "policy");
  auto internal = from_error(Error{ErrorCode::system, ENOENT, "open /var/lib/cela/x"});
  EXPECT_EQ(internal.status, 500);
  EXPECT_EQ(internal.message.find("/var/lib"), std::string::npos);
  EXPECT_NE(internal.log_detail.find("/var/lib/cela/x"), std::string::npos);
}

TEST(ApiRouter, LiteralSegmentsBeatCaptures) {
  Router router;
  std::string hit;
  router.add(http::verb::get, "/v1/templates/{name}", {},
             [&](Request&, Responder&) { hit = "capture"; });
  router.add(http::verb::get, "/v1/templates/builtin", {},
             [&](Request&, Responder&) { hit = "literal"; });
  auto m = router.match(http::verb::get, {"v1", "templates", "builtin"});
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.route->pattern, "/v1/templates/builtin");
  m = router.match(http::verb::get, {"v1", "templates", "python"});
  ASSERT_NE(m.route, nullptr);
  EXPECT_EQ(m.params.at("name"), "python");
  m = router.match(http::verb::post, {"v1", "templates", "python"});
  EXPECT_EQ(m.route, nullptr);
  EXPECT_TRUE(m.path_known);
  EXPECT_EQ(m.allow, "GET");
  m = router.match(http::verb::get, {"v1", "templates"});
  EXPECT_EQ(m.route, nullptr);
  EXPECT_FALSE(m.path_known);
}

TEST(ApiRequest, TargetDecodingRejectsBadEscapes) {
  auto ok = parse_target("/v1/a%20b/?q=1");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->segments, (std::vector<std::string>{"v1", "a b"}));
  auto bad = parse_target("/v1/%zz");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, "invalid_request");
  EXPECT_FALSE(parse_target("http://example.com/x"));
}

// Request smuggling: only one Content-Length or a sole `chunked` on HTTP/1.1 frames a body.
TEST(ApiRequest, FramingAcceptsOnlyOneLengthOrASoleChunked) {
  auto fields = [](std::initializer_list<std::pair<const char*, const char*>> list) {
    http::fields f;
    for (auto [name, value] : list) f.insert(name, value);
    return f;
  };
  EXPECT_TRUE(check_framing(fields({}), 11));
  EXPECT_TRUE(check_framing(fields({{"Content-Length", "12"}}), 11));
  EXPECT_TRUE(check_framing(fields({{"Content-Length", "12"}}), 10));
  EXPECT_TRUE(check_framing(fields({{"Transfer-Encoding", "chunked"}}), 11));
  EXPECT_TRUE(check_framing(fields({{"Transfer-Encoding", "Chunked"}}), 11));
  EXPECT_TRUE(check_framing(fields({{"Transfer-Encoding", " chunked\t"}}), 11));
  for (const char* coding : {"identity", "gzip", "chunked, identity", "gzip, chunked", "chunked, chunked",
                             "x-unknown", "", "chunked;q=1", "\vchunked"}) {
    auto r = check_framing(fields({{"Transfer-Encoding", coding}}), 11);
    ASSERT_FALSE(r) << coding;
    EXPECT_EQ(r.error().code, "invalid_request");
    EXPECT_EQ(r.error().status, 400);
  }
  EXPECT_FALSE(check_framing(fields({{"Transfer-Encoding", "chunked"}}), 10));
  EXPECT_FALSE(check_framing(fields({{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}}), 11));
  EXPECT_FALSE(check_framing(fields({{"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"}}), 11));
  EXPECT_FALSE(check_framing(fields({{"Transfer-Encoding", "chunked"}, {"Content-Length", "3"}}), 11));
  EXPECT_FALSE(check_framing(fields({{"Content-Length", "3"}, {"Content-Length", "3"}}), 11));
  EXPECT_FALSE(check_framing(fields({{"Content-Length", "3"}, {"Content-Length", "4"}}), 11));
  EXPECT_FALSE(check_framing(fields({{"Content-Length", "3, 3"}}), 11));
  EXPECT_FALSE(check_framing(fields({{"Content-Length", "+3"}}), 11));
}

TEST(JsonFields, TypedFieldsNameTheOffendingField) {
  auto body = parse_json_object(
      R"({"argv": ["a", 2], "env": {"K": "V"}, "limits": {"cpus": 1.5, "memory_mb": 512.0},
          "tty": false, "stdin": null, "extra": 1})");
  ASSERT_TRUE(body);
  JsonFields f(*body);
  EXPECT_EQ(f.string_array("argv").error().context, "field `argv[1]` must be a string");
  EXPECT_EQ(f.string_map("env").value()->at("K"), "V");
  auto limits = f.require_object("limits").value();
  EXPECT_EQ(limits.number("cpus").value(), 1.5);
  EXPECT_EQ(limits.integer("memory_mb").value(), 512);
  EXPECT_EQ(limits.integer("cpus").error().context, "field `limits.cpus` must be an integer");
  EXPECT_EQ(f.boolean("tty").value(), false);
  EXPECT_FALSE(f.string("stdin").value().has_value());  // null reads as absent
  EXPECT_EQ(f.require_string("cmd").error().context, "field `cmd` is required");
  EXPECT_EQ(f.only({"argv", "env", "limits", "tty", "stdin"}).error().context,
            "unknown field `extra`");
  EXPECT_TRUE(f.only({"argv", "env", "limits", "tty", "stdin", "extra"}).has_value());
  auto big = parse_json_object(R"({"n": 9223372036854775808, "m": -9223372036854775808})");
  ASSERT_TRUE(big);
  EXPECT_EQ(JsonFields(*big).integer("n").error().context, "field `n` is out of range");
  EXPECT_EQ(JsonFields(*big).integer("m").value(), INT64_MIN);
  EXPECT_EQ(f.string_array("argv").error().code, ErrorCode::invalid_argument);
  EXPECT_FALSE(parse_json_object("\"just a string\""));
  EXPECT_FALSE(parse_json_object("{\"a\": \"\xff\"}"));  // invalid UTF-8
}

// ---- the E2B sandbox table (HttpServer::sandbox_router) and error styles

TEST_F(ApiServer, SandboxHeaderRoutesToTheSandboxTableWithItsPort) {
  start([](Router& router, HttpServer& server) {
    router.add(http::verb::get, "/health", {}, [](Request&, Responder& res) {
      res.json(200, json::object{{"table", "main"}});
    }, RouteOptions().make_public());
    server.sandbox_router().add(http::verb::get, "/49983/health", {}, [](Request& req, Responder& res) {
      res.json(200, json::object{{"table", "sandbox"},
                                 {"tenant", req.principal ? req.principal->tenant_id : ""}});
    });
    server.sandbox_router().add(http::verb::get, "/{port}/{rest...}", {}, [](Request& req, Responder& res) {
      res.json(200, json::object{{"port", req.param("port")}, {"rest", req.param("rest")}});
    });
    server.set_sandbox_authenticator([](const Request& req) -> std::expected<Principal, ApiError> {
      if (req.header("X-Access-Token") == "good") return Principal{"t-sbx", false, "sandbox:s"};
      return std::unexpected(ApiError::unauthorized("bad token"));
    });
  });
  // Without the header: the main table, whose /health is public.
  auto main = call("GET", "/health", {}, {}, false);
  ASSERT_TRUE(main);
  EXPECT_EQ(main->json_body().at("table").as_string(), "main");

  // With it: the sandbox table, authenticated by the sandbox authenticator only (the
  // API key of the main table opens nothing here).
  auto envd = call("GET", "/health", {}, "E2b-Sandbox-Id: s\r\nX-Access-Token: good\r\n", false);
  ASSERT_TRUE(envd);
  ASSERT_EQ(envd->status, 200) << envd->body;
  EXPECT_EQ(envd->json_body().at("table").as_string(), "sandbox");
  EXPECT_EQ(envd->json_body().at("tenant").as_string(), "t-sbx");
  auto keyed = call("GET", "/health", {}, "E2b-Sandbox-Id: s\r\n", true);
  ASSERT_TRUE(keyed);
  ASSERT_EQ(keyed->status, 401) << keyed->body;
  // ...in E2B's error shape: {"code": <status>, "message"}.
  EXPECT_EQ(keyed->json_body().at("code").as_int64(), 401);
  EXPECT_EQ(keyed->json_body().at("message").as_string(), "bad token");

  auto port = call("GET", "/a/b?x=1", {},
                   "E2b-Sandbox-Id: s\r\nE2b-Sandbox-Port: 49999\r\nX-Access-Token: good\r\n", false);
  ASSERT_TRUE(port);
  ASSERT_EQ(port->status, 200) << port->body;
  EXPECT_EQ(port->json_body().at("port").as_string(), "49999");
  EXPECT_EQ(port->json_body().at("rest").as_string(), "a/b");

  auto missing = call("POST", "/nowhere", {}, "E2b-Sandbox-Id: s\r\nX-Access-Token: good\r\n", false);
  ASSERT_TRUE(missing);
  ASSERT_EQ(missing->status, 405) << missing->body;  // /{port}/{rest...} knows the path, with GET only
  EXPECT_EQ(missing->json_body().at("code").as_int64(), 405);
}

TEST_F(ApiServer, ErrorStylesShapeEveryErrorOfTheirRoute) {
  start([](Router& router, HttpServer&) {
    router.add(http::verb::post, "/e2b", {}, [](Request&, Responder& res) {
      res.error(ApiError::conflict("already paused"));
    }, RouteOptions().with_error_style(ErrorStyle::e2b).with_body_limit(4));
    router.add(http::verb::post, "/connect", {}, [](Request&, Responder& res) {
      ApiError e = ApiError::conflict("exists");
      e.wire_code = "already_exists";
      res.error(e);
    }, RouteOptions().with_error_style(ErrorStyle::connect));
    router.add(http::verb::post, "/connect-mapped", {}, [](Request&, Responder& res) {
      res.error(ApiError::not_found("no such file"));
    }, RouteOptions().with_error_style(ErrorStyle::connect));
  });
  auto e2b = call("POST", "/e2b");
  ASSERT_TRUE(e2b);
  EXPECT_EQ(e2b->status, 409);
  EXPECT_EQ(e2b->json_body(), (json::object{{"code", 409}, {"message", "already paused"}}));
  // The server's own answers take the route's style too.
  auto unauthorized = call("POST", "/e2b", {}, {}, false);
  ASSERT_TRUE(unauthorized);
  EXPECT_EQ(unauthorized->json_body().at("code").as_int64(), 401);
  auto too_large = call("POST", "/e2b", "12345");
  ASSERT_TRUE(too_large);
  EXPECT_EQ(too_large->status, 413);
  EXPECT_EQ(too_large->json_body().at("code").as_int64(), 413);

  auto connect = call("POST", "/connect");
  ASSERT_TRUE(connect);
  EXPECT_EQ(connect->status, 409);
  EXPECT_EQ(connect->json_body(), (json::object{{"code", "already_exists"}, {"message", "exists"}}));
  auto mapped = call("POST", "/connect-mapped");
  ASSERT_TRUE(mapped);
  EXPECT_EQ(mapped->status, 404);
  EXPECT_EQ(mapped->json_body().at("code").as_string(), "not_found");

  // A keep-alive connection goes back to cela's own shape for its next request.
  TestClient c = client();
  c.send(request_text("POST", "/e2b", {}, {}, true));
  auto first = c.read_response();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->json_body().at("code").as_int64(), 409);
  c.send(request_text("GET", "/none", {}, {}, true));
  auto second = c.read_response();
  ASSERT_TRUE(second);
  EXPECT_EQ(second->status, 404);
  EXPECT_EQ(second->error().at("code").as_string(), "not_found");
}
