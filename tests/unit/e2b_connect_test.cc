// The Connect codec of the E2B data plane (api/e2b/connect.h): envelope framing, the
// request checks, and a ServerStream served by a real HttpServer (keepalive, deadline,
// drop, end-of-stream).
#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "api/e2b/connect.h"
#include "api/server.h"

using namespace cela;
using namespace cela::api;
using namespace cela::api::e2b;
using namespace std::chrono_literals;
namespace json = boost::json;
namespace http = boost::beast::http;
namespace asio = boost::asio;

namespace {

Request stream_req(std::string body, std::string type = "application/connect+json") {
  Request r;
  r.headers.set(http::field::content_type, type);
  r.body = std::move(body);
  return r;
}

}  // namespace

TEST(E2bConnect, EnvelopeIsFlagThenBigEndianLength) {
  std::string e = connect::encode_envelope(0x02, std::string(300, 'x'));
  ASSERT_EQ(e.size(), 305u);
  EXPECT_EQ(static_cast<unsigned char>(e[0]), 0x02);
  EXPECT_EQ(static_cast<unsigned char>(e[1]), 0);
  EXPECT_EQ(static_cast<unsigned char>(e[2]), 0);
  EXPECT_EQ(static_cast<unsigned char>(e[3]), 0x01);
  EXPECT_EQ(static_cast<unsigned char>(e[4]), 0x2c);
}

TEST(E2bConnect, ReaderReassemblesEnvelopesSplitAnywhere) {
  std::string bytes = connect::encode_envelope(0, R"({"a":1})") + connect::encode_envelope(0, "") +
                      connect::encode_envelope(2, "{}");
  // Byte by byte: nothing comes out before an envelope is whole.
  connect::EnvelopeReader reader;
  std::vector<connect::Envelope> got;
  for (char c : bytes) {
    ASSERT_TRUE(reader.feed(std::string_view(&c, 1)));
    while (auto e = reader.next()) got.push_back(std::move(*e));
  }
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].data, R"({"a":1})");
  EXPECT_EQ(got[1].data, "");
  EXPECT_EQ(got[2].flags, 2);
  EXPECT_TRUE(reader.empty());
  // A header alone is not an envelope.
  connect::EnvelopeReader partial;
  ASSERT_TRUE(partial.feed(bytes.substr(0, 4)));
  EXPECT_FALSE(partial.next());
  EXPECT_FALSE(partial.empty());
}

TEST(E2bConnect, ReaderRefusesAnOversizeEnvelopeFromItsHeader) {
  connect::EnvelopeReader reader(16);
  std::string big = connect::encode_envelope(0, std::string(17, 'x'));
  auto fed = reader.feed(big.substr(0, 5));  // the header alone is enough to refuse
  ASSERT_FALSE(fed);
  EXPECT_EQ(fed.error().code, "payload_too_large");
  EXPECT_EQ(connect_code(fed.error()), "resource_exhausted");
  EXPECT_FALSE(reader.feed(big.substr(5)));  // and it stays refused
  EXPECT_FALSE(reader.next());
  // After a good envelope, the oversize one behind it is refused too.
  connect::EnvelopeReader second(16);
  ASSERT_TRUE(second.feed(connect::encode_envelope(0, "{}") + big.substr(0, 5)));
  EXPECT_TRUE(second.next());
  EXPECT_FALSE(second.next());
  EXPECT_TRUE(second.failed());
}

TEST(E2bConnect, StreamRequestHoldsExactlyOneDataEnvelope) {
  auto ok = connect::stream_request(stream_req(connect::encode_envelope(0, R"({"process":{"pid":7}})")));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->at("process").at("pid").as_int64(), 7);
  // Content-Type parameters and case do not matter.
  EXPECT_TRUE(connect::stream_request(
      stream_req(connect::encode_envelope(0, "{}"), "Application/Connect+JSON; charset=utf-8")));

  auto compressed = connect::stream_request(stream_req(connect::encode_envelope(0x01, "{}")));
  ASSERT_FALSE(compressed);
  EXPECT_EQ(connect_code(compressed.error()), "invalid_argument");
  EXPECT_NE(compressed.error().message.find("compressed"), std::string::npos);

  auto bad_json = connect::stream_request(stream_req(connect::encode_envelope(0, "{\"a\":")));
  ASSERT_FALSE(bad_json);
  EXPECT_EQ(connect_code(bad_json.error()), "invalid_argument");
  EXPECT_FALSE(connect::stream_request(stream_req(connect::encode_envelope(0, "[1]"))));

  EXPECT_FALSE(connect::stream_request(stream_req("")));                                 // no envelope
  EXPECT_FALSE(connect::stream_request(stream_req(connect::encode_envelope(0, "{}").substr(0, 6))));  // cut
  EXPECT_FALSE(connect::stream_request(
      stream_req(connect::encode_envelope(0, "{}") + connect::encode_envelope(0, "{}"))));  // two
  EXPECT_FALSE(connect::stream_request(stream_req(connect::encode_envelope(0x02, "{}"))));  // end-stream
  auto unary_type = connect::stream_request(stream_req(connect::encode_envelope(0, "{}"), "application/json"));
  ASSERT_FALSE(unary_type);
  EXPECT_EQ(unary_type.error().code, "unsupported_media_type");
  std::string huge = connect::encode_envelope(0, std::string(connect::kMaxRequestBytes + 1, ' '));
  auto too_big = connect::stream_request(stream_req(huge));
  ASSERT_FALSE(too_big);
  EXPECT_EQ(connect_code(too_big.error()), "resource_exhausted");
}

TEST(E2bConnect, UnaryRequestIsAJsonObject) {
  auto ok = connect::unary_request(stream_req(R"({"path":"/tmp"})", "application/json"));
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->at("path").as_string(), "/tmp");
  auto empty = connect::unary_request(stream_req("", "application/json"));
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
  EXPECT_FALSE(connect::unary_request(stream_req("{", "application/json")));
  EXPECT_FALSE(connect::unary_request(stream_req("{}", "application/proto")));
  EXPECT_FALSE(connect::unary_request(stream_req(connect::encode_envelope(0, "{}"))));
}

TEST(E2bConnect, CallOptionsReadTheConnectHeaders) {
  Request r;
  auto none = connect::call_options(r);
  ASSERT_TRUE(none);
  EXPECT_FALSE(none->timeout);
  EXPECT_FALSE(none->keepalive);
  r.headers.set("Connect-Protocol-Version", "1");
  r.headers.set("Connect-Timeout-Ms", "60000");
  r.headers.set("Keepalive-Ping-Interval", "50");
  auto all = connect::call_options(r);
  ASSERT_TRUE(all);
  EXPECT_EQ(*all->timeout, 60000ms);
  EXPECT_EQ(*all->keepalive, 50s);
  r.headers.set("Connect-Timeout-Ms", "12345678901");  // 11 digits
  EXPECT_FALSE(connect::call_options(r));
  r.headers.set("Connect-Timeout-Ms", "-5");
  EXPECT_FALSE(connect::call_options(r));
  r.headers.set("Connect-Timeout-Ms", "5");
  r.headers.set("Connect-Protocol-Version", "2");
  EXPECT_FALSE(connect::call_options(r));
}

TEST(E2bConnect, EndStreamCarriesTheConnectError) {
  EXPECT_EQ(connect::end_stream_json(nullptr), "{}");
  ApiError e = ApiError::not_found("process 12 not found");
  auto v = json::parse(connect::end_stream_json(&e)).as_object();
  EXPECT_EQ(v.at("error").at("code").as_string(), "not_found");
  EXPECT_EQ(v.at("error").at("message").as_string(), "process 12 not found");
}

// ---- ServerStream on a real server

namespace {

struct StreamedResponse {
  int status = 0;
  std::string content_type;
  std::vector<connect::Envelope> envelopes;
  bool complete = false;  // the chunked body ended properly
  std::chrono::milliseconds took{0};
};

class E2bConnectServer : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerConfig config;
    config.tcp_host = "127.0.0.1";
    config.tcp_port = 0;
    config.io_threads = 2;
    config.blocking_threads = 2;
    config.log = [](std::string_view) {};
    server_ = std::make_unique<HttpServer>(config);
    server_->set_authenticator(
        [](const Request&) -> std::expected<Principal, ApiError> { return Principal{"t-1", false, "k-1"}; });
  }
  void TearDown() override { server_->stop(); }

  void add(std::string path, Handler h) {
    server_->router().add(http::verb::post, path, RouteDoc{}, std::move(h), connect::route_options());
  }

  StreamedResponse call(const std::string& path, const std::string& message, http::fields extra = {}) {
    asio::io_context io;
    asio::ip::tcp::socket socket(io);
    socket.connect({asio::ip::make_address("127.0.0.1"), server_->tcp_port()});
    http::request<http::string_body> req{http::verb::post, path, 11};
    req.set(http::field::host, "localhost");
    req.set(http::field::content_type, "application/connect+json");
    for (auto& f : extra) req.set(f.name_string(), f.value());
    req.body() = connect::encode_envelope(0, message);
    req.prepare_payload();
    auto began = std::chrono::steady_clock::now();
    http::write(socket, req);
    boost::beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    boost::system::error_code ec;
    http::read(socket, buffer, parser, ec);
    StreamedResponse out;
    out.took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
    out.complete = !ec && parser.is_done();
    auto& res = parser.get();
    out.status = static_cast<int>(res.result_int());
    out.content_type = std::string(res[http::field::content_type]);
    connect::EnvelopeReader reader(1 << 20);
    EXPECT_TRUE(reader.feed(res.body()));
    while (auto e = reader.next()) out.envelopes.push_back(std::move(*e));
    return out;
  }

  std::unique_ptr<HttpServer> server_;
};

}  // namespace

TEST_F(E2bConnectServer, StreamSendsDataThenEndOfStream) {
  add("/s", [](Request& req, Responder& res) {
    auto msg = connect::stream_request(req);
    ASSERT_TRUE(msg);
    auto s = connect::ServerStream::start(res, *connect::call_options(req));
    EXPECT_TRUE(s->send(json::object{{"echo", (*msg)["n"]}}));
    s->finish();
    EXPECT_FALSE(s->send(json::object{}));  // nothing after the end
  });
  ASSERT_TRUE(server_->start());
  auto r = call("/s", R"({"n":5})");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.content_type, "application/connect+json");
  EXPECT_TRUE(r.complete);
  ASSERT_EQ(r.envelopes.size(), 2u);
  EXPECT_EQ(r.envelopes[0].flags, 0);
  EXPECT_EQ(json::parse(r.envelopes[0].data).at("echo").as_int64(), 5);
  EXPECT_EQ(r.envelopes[1].flags, connect::kEndStreamFlag);
  EXPECT_EQ(r.envelopes[1].data, "{}");
}

TEST_F(E2bConnectServer, AnEarlyFailureIsAnEndOfStreamError) {
  add("/s", [](Request& req, Responder& res) {
    auto msg = connect::stream_request(req);
    if (!msg) return connect::fail_stream(res, msg.error());
  });
  ASSERT_TRUE(server_->start());
  auto r = call("/s", "{");  // not JSON
  EXPECT_EQ(r.status, 200);
  ASSERT_EQ(r.envelopes.size(), 1u);
  EXPECT_EQ(r.envelopes[0].flags, connect::kEndStreamFlag);
  EXPECT_EQ(json::parse(r.envelopes[0].data).at("error").at("code").as_string(), "invalid_argument");
}

TEST_F(E2bConnectServer, IdleStreamSendsKeepalives) {
  std::shared_ptr<connect::ServerStream> kept;
  add("/s", [&](Request& req, Responder& res) {
    kept = connect::ServerStream::start(res, *connect::call_options(req),
                                        json::object{{"event", json::object{{"keepalive", json::object{}}}}});
    std::thread([s = kept] {
      std::this_thread::sleep_for(2500ms);
      s->finish();
    }).detach();
  });
  ASSERT_TRUE(server_->start());
  http::fields h;
  h.set("Keepalive-Ping-Interval", "1");
  auto r = call("/s", "{}", h);
  ASSERT_GE(r.envelopes.size(), 3u);  // two pings in 2.5 s, then the end
  for (std::size_t i = 0; i + 1 < r.envelopes.size(); ++i)
    EXPECT_EQ(r.envelopes[i].data, R"({"event":{"keepalive":{}}})");
  EXPECT_EQ(r.envelopes.back().flags, connect::kEndStreamFlag);
  kept.reset();
}

TEST_F(E2bConnectServer, NoKeepaliveWithoutTheHeader) {
  add("/s", [&](Request& req, Responder& res) {
    auto s = connect::ServerStream::start(res, *connect::call_options(req), json::object{{"ping", 1}});
    std::thread([s] {
      std::this_thread::sleep_for(1200ms);
      s->finish();
    }).detach();
  });
  ASSERT_TRUE(server_->start());
  auto r = call("/s", "{}");
  ASSERT_EQ(r.envelopes.size(), 1u);
  EXPECT_EQ(r.envelopes[0].flags, connect::kEndStreamFlag);
}

TEST_F(E2bConnectServer, DeadlineEndsTheStreamWithDeadlineExceeded) {
  std::atomic<int> deadline_calls{0};
  std::shared_ptr<connect::ServerStream> kept;
  add("/s", [&](Request& req, Responder& res) {
    kept = connect::ServerStream::start(res, *connect::call_options(req));
    kept->on_deadline([&] { ++deadline_calls; });
    kept->send(json::object{{"started", true}});
  });
  ASSERT_TRUE(server_->start());
  http::fields h;
  h.set("Connect-Timeout-Ms", "300");
  auto r = call("/s", "{}", h);
  EXPECT_TRUE(r.complete);
  EXPECT_GE(r.took, 290ms);
  EXPECT_LT(r.took, 3000ms);
  ASSERT_EQ(r.envelopes.size(), 2u);
  EXPECT_EQ(json::parse(r.envelopes[1].data).at("error").at("code").as_string(), "deadline_exceeded");
  EXPECT_EQ(deadline_calls.load(), 1);
  kept.reset();
}

TEST_F(E2bConnectServer, DropCutsTheStreamWithoutAnEnd) {
  add("/s", [&](Request& req, Responder& res) {
    auto s = connect::ServerStream::start(res, *connect::call_options(req));
    s->send(json::object{{"n", 1}});
    std::thread([s] {
      std::this_thread::sleep_for(200ms);
      s->drop();
    }).detach();
  });
  ASSERT_TRUE(server_->start());
  auto r = call("/s", "{}");
  EXPECT_FALSE(r.complete);
  for (auto& e : r.envelopes) EXPECT_EQ(e.flags & connect::kEndStreamFlag, 0);
}
