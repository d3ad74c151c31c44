// The messages of the session WebSocket (api/ws_protocol.h): each client type parsed
// into what its REST route would get, and every malformed message refused as
// invalid_request naming the ref or exec it carried.
#include "api/ws_protocol.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <boost/json.hpp>

namespace cela::api::ws {
namespace {
namespace json = boost::json;

const session::DaemonConfig& config() {
  static session::DaemonConfig c;
  return c;
}

ClientMessage ok(std::string_view text) {
  auto m = parse_client_message(text, config());
  EXPECT_TRUE(m.has_value()) << text << ": " << (m ? "" : m.error().error.message);
  return m ? *m : ClientMessage{};
}

Refusal refused(std::string_view text) {
  auto m = parse_client_message(text, config());
  EXPECT_FALSE(m.has_value()) << text;
  if (m) return Refusal{{}, {}, ApiError::internal()};
  EXPECT_EQ(m.error().error.code, "invalid_request") << text;
  return m.error();
}

TEST(WsProtocol, ExecIsTheRestBodyPlusRef) {
  auto m = ok(R"({"type":"exec","ref":"r1","argv":["ls","-l"],"cwd":"/tmp","env":{"A":"1"},"stdin_open":true})");
  auto& e = std::get<Exec>(m);
  EXPECT_EQ(e.ref, "r1");
  EXPECT_EQ(e.spec.argv, (std::vector<std::string>{"ls", "-l"}));
  EXPECT_EQ(e.spec.cwd, "/tmp");
  EXPECT_EQ(e.spec.env, (std::vector<std::string>{"A=1"}));
  EXPECT_TRUE(e.spec.stdin_open);
  EXPECT_EQ(std::get<Exec>(ok(R"({"type":"exec","cmd":"true"})")).ref, "");
}

TEST(WsProtocol, EveryOtherClientType) {
  auto in = std::get<Stdin>(ok(R"({"type":"stdin","exec":"e-1","data":"aGkK"})"));
  EXPECT_EQ(in.exec, "e-1");
  EXPECT_EQ(in.data, "hi\n");
  EXPECT_EQ(std::get<Stdin>(ok(R"({"type":"stdin","exec":"e-1","data":""})")).data, "");
  EXPECT_EQ(std::get<CloseStdin>(ok(R"({"type":"close_stdin","exec":"e-2"})")).exec, "e-2");
  auto k = std::get<Kill>(ok(R"({"type":"kill","exec":"e-3","signal":"SIGINT","grace_s":1})"));
  EXPECT_EQ(k.exec, "e-3");
  EXPECT_EQ(k.spec.signal, SIGINT);
  EXPECT_EQ(k.spec.grace, std::chrono::milliseconds(1000));
  EXPECT_EQ(std::get<Kill>(ok(R"({"type":"kill","exec":"e-3"})")).spec.signal, SIGTERM);
  auto r = std::get<Resize>(ok(R"({"type":"resize","exec":"e-4","cols":132,"rows":43})"));
  EXPECT_EQ(r.cols, 132);
  EXPECT_EQ(r.rows, 43);
  auto a = std::get<Attach>(ok(R"({"type":"attach","exec":"e-5","offset":"10,20"})"));
  EXPECT_EQ(a.exec, "e-5");
  EXPECT_EQ(a.stdout_from, 10u);
  EXPECT_EQ(a.stderr_from, 20u);
  auto from_start = std::get<Attach>(ok(R"({"type":"attach","exec":"e-5"})"));
  EXPECT_EQ(from_start.stdout_from + from_start.stderr_from, 0u);
}

TEST(WsProtocol, MalformedMessagesAreRefusedNamingTheirIds) {
  refused("not json");
  refused("[1,2]");
  refused(R"({"ref":"r"})");
  EXPECT_EQ(refused(R"({"type":"exec","ref":"r9","cmd":"true","bogus":1})").ref, "r9");
  EXPECT_EQ(refused(R"({"type":"exec","ref":"r9"})").ref, "r9");
  EXPECT_EQ(refused(R"({"type":"exec","ref":"r9","exec":"e-1","cmd":"x"})").ref, "r9");
  EXPECT_EQ(refused(R"({"type":"nope","exec":"e-7"})").exec, "e-7");
  EXPECT_EQ(refused(R"({"type":"stdin","exec":"e-7","data":"!!"})").exec, "e-7");
  EXPECT_EQ(refused(R"({"type":"stdin","exec":"e-7"})").exec, "e-7");
  EXPECT_EQ(refused(R"({"type":"stdin","exec":"e-7","data":"aGk=","more":1})").exec, "e-7");
  refused(R"({"type":"stdin","data":"aGk="})");
  refused(R"({"type":"stdin","exec":7,"data":"aGk="})");
  EXPECT_EQ(refused(R"({"type":"stdin","exec":"e-7","ref":"r","data":""})").exec, "e-7");
  EXPECT_EQ(refused(R"({"type":"kill","exec":"e-7","signal":"SIGFOO"})").exec, "e-7");
  // The bounds of POST …/resize (1..1000).
  for (auto bad : {R"("cols":0,"rows":1)", R"("cols":1001,"rows":1)", R"("cols":65536,"rows":1)", R"("cols":1.5,"rows":1)",
                   R"("cols":80)"})
    EXPECT_EQ(refused(std::string(R"({"type":"resize","exec":"e-7",)") + bad + "}").exec, "e-7") << bad;
  for (auto bad : {"12", "1,", ",2", "a,b", "1,2,3", "-1,0", ""})
    EXPECT_EQ(refused(std::string(R"({"type":"attach","exec":"e-7","offset":")") + bad + "\"}").exec, "e-7") << bad;
}

TEST(WsProtocol, ServerMessages) {
  session::ExecRecord rec;
  rec.id = "e-1";
  rec.pid = 42;
  auto started = json::parse(started_message("r1", rec)).as_object();
  EXPECT_EQ(started.at("type"), "started");
  EXPECT_EQ(started.at("ref"), "r1");
  EXPECT_EQ(started.at("exec"), "e-1");
  EXPECT_EQ(started.at("pid"), 42);
  auto out = json::parse(output_message(session::Stream::stderr_stream, "e-1", std::string("\0\xff", 2), "0,2")).as_object();
  EXPECT_EQ(out.at("type"), "stderr");
  EXPECT_EQ(out.at("data"), "AP8=");
  EXPECT_EQ(out.at("offset"), "0,2");
  auto exit = json::parse(exit_message(rec)).as_object();
  EXPECT_EQ(exit.at("record").at("id"), "e-1");
  auto err = json::parse(error_message("", "e-1", ApiError::conflict("no"), "r-1")).as_object();
  EXPECT_EQ(err.at("error").at("code"), "conflict");
  EXPECT_EQ(err.at("error").at("request_id"), "r-1");
  EXPECT_EQ(err.at("exec"), "e-1");
  EXPECT_FALSE(err.contains("ref"));
  EXPECT_EQ(position(3, 4), "3,4");
}

}  // namespace
}  // namespace cela::api::ws
