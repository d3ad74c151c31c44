// The port proxy's pure parts (api/port_proxy.h): target rewriting, the header rules
// both ways, upgrade detection; the router's tail capture it is registered with; and
// the /proc parsing of the process list (jail/processes.h).
#include <gtest/gtest.h>
#include <signal.h>

#include <boost/json/parse.hpp>

#include "api/port_proxy.h"
#include "api/router.h"
#include "api/session_specs.h"
#include "jail/processes.h"

using namespace cela;
using namespace cela::api;

TEST(PortProxy, TargetIsThePathAfterThePortAndTheQuery) {
  EXPECT_EQ(*proxied_target("/v1/sessions/s-1/ports/8000/a/b%20c?x=1&y=%2F", 5), "/a/b%20c?x=1&y=%2F");
  EXPECT_EQ(*proxied_target("/v1/sessions/s-1/ports/8000", 5), "/");
  EXPECT_EQ(*proxied_target("/v1/sessions/s-1/ports/8000/", 5), "/");
  EXPECT_EQ(*proxied_target("/v1/sessions/s-1/ports/8000?q", 5), "/?q");
  EXPECT_EQ(*proxied_target("/v1/sessions/s-1/ports/8000/dir/", 5), "/dir/");
  // An encoded slash stays inside its segment: the prefix is five raw segments.
  EXPECT_EQ(*proxied_target("/v1/sessions/s%2F1/ports/80/x", 5), "/x");
  EXPECT_FALSE(proxied_target("/v1/sessions/s-1", 5));
  EXPECT_FALSE(proxied_target("http://evil/v1/sessions/s/ports/1/x", 5));
}

TEST(PortProxy, RequestFieldsLoseHopByHopAndTheKey) {
  http::fields in;
  in.set(http::field::authorization, "Bearer sk-secret");
  in.set(http::field::proxy_authorization, "Basic x");
  in.set(http::field::host, "daemon.example:8080");
  in.set(http::field::connection, "keep-alive, X-Private");
  in.set("X-Private", "hop");
  in.set(http::field::keep_alive, "timeout=5");
  in.set(http::field::transfer_encoding, "chunked");
  in.set(http::field::content_length, "12");
  in.set(http::field::te, "trailers");
  in.set(http::field::expect, "100-continue");
  in.set(http::field::cookie, "a=b");
  in.set("X-Forwarded-Prefix", "/spoofed");
  in.set("X-Custom", "kept");
  http::fields out = upstream_request_fields(in, 8000, "/v1/sessions/s/ports/8000", false);
  for (auto name : {"Authorization", "Proxy-Authorization", "X-Private", "Keep-Alive", "Transfer-Encoding",
                    "Content-Length", "TE", "Expect"})
    EXPECT_EQ(out.find(name), out.end()) << name;
  EXPECT_EQ(out[http::field::host], "127.0.0.1:8000");
  EXPECT_EQ(out["X-Forwarded-Host"], "daemon.example:8080");
  EXPECT_EQ(out["X-Forwarded-Prefix"], "/v1/sessions/s/ports/8000");
  EXPECT_EQ(out.count("X-Forwarded-Prefix"), 1u);
  EXPECT_EQ(out[http::field::connection], "close");
  EXPECT_EQ(out[http::field::cookie], "a=b");
  EXPECT_EQ(out["X-Custom"], "kept");
}

TEST(PortProxy, WebSocketUpgradeKeepsOnlyItsOwnHopFields) {
  http::fields in;
  in.set(http::field::upgrade, "WebSocket");
  in.set(http::field::connection, "keep-alive, Upgrade");
  in.set(http::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  in.set(http::field::sec_websocket_version, "13");
  ASSERT_TRUE(is_websocket_upgrade(in));
  http::fields out = upstream_request_fields(in, 9000, "/p", true);
  EXPECT_EQ(out[http::field::connection], "Upgrade");
  EXPECT_EQ(out[http::field::upgrade], "websocket");
  EXPECT_EQ(out[http::field::sec_websocket_key], "dGhlIHNhbXBsZSBub25jZQ==");
  http::fields plain;
  plain.set(http::field::upgrade, "websocket");  // Connection does not name it
  EXPECT_FALSE(is_websocket_upgrade(plain));
  plain.set(http::field::connection, "close");
  EXPECT_FALSE(is_websocket_upgrade(plain));
  http::fields h2c;
  h2c.set(http::field::upgrade, "h2c");
  h2c.set(http::field::connection, "Upgrade");
  EXPECT_FALSE(is_websocket_upgrade(h2c));
}

TEST(PortProxy, ResponseFieldsLoseHopByHopAndFraming) {
  http::fields in;
  in.set(http::field::connection, "close, X-Secret-Hop");
  in.set("X-Secret-Hop", "1");
  in.set(http::field::transfer_encoding, "chunked");
  in.set(http::field::content_length, "5");
  in.set(http::field::proxy_authenticate, "Basic");
  in.set(http::field::set_cookie, "s=1");
  in.set(http::field::content_type, "text/html");
  http::fields out = client_response_fields(in);
  for (auto name : {"Connection", "X-Secret-Hop", "Transfer-Encoding", "Content-Length", "Proxy-Authenticate"})
    EXPECT_EQ(out.find(name), out.end()) << name;
  EXPECT_EQ(out[http::field::set_cookie], "s=1");
  EXPECT_EQ(out[http::field::content_type], "text/html");
}

TEST(PortProxy, RouterTailCaptureTakesTheRest) {
  Router router;
  router.add(http::verb::get, "/v1/sessions/{id}/ports/{port}/{path...}", {}, [](Request&, Responder&) {});
  router.add(http::verb::get, "/v1/sessions/{id}", {}, [](Request&, Responder&) {});
  auto m = router.match(http::verb::get, {"v1", "sessions", "s-1", "ports", "80", "a", "b"});
  ASSERT_TRUE(m.route);
  EXPECT_EQ(m.params["path"], "a/b");
  EXPECT_EQ(m.params["port"], "80");
  m = router.match(http::verb::get, {"v1", "sessions", "s-1", "ports", "80"});
  ASSERT_TRUE(m.route);
  EXPECT_EQ(m.params["path"], "");
  EXPECT_FALSE(router.match(http::verb::get, {"v1", "sessions", "s-1", "ports"}).route);
  EXPECT_TRUE(router.match(http::verb::post, {"v1", "sessions", "s-1", "ports", "80", "x"}).path_known);
}

TEST(Processes, SignalBodies) {
  auto sig = [](const char* text) { return parse_process_signal(boost::json::parse(text).as_object()); };
  EXPECT_EQ(*sig(R"({"signal": "TERM"})"), SIGTERM);
  EXPECT_EQ(*sig(R"({"signal": "SIGKILL"})"), SIGKILL);
  EXPECT_EQ(*sig(R"({"signal": "STOP"})"), SIGSTOP);
  EXPECT_EQ(*sig(R"({"signal": "CONT"})"), SIGCONT);
  EXPECT_EQ(*sig(R"({"signal": 10})"), 10);
  EXPECT_FALSE(sig(R"({"signal": 0})"));
  EXPECT_FALSE(sig(R"({"signal": 65})"));
  EXPECT_FALSE(sig(R"({"signal": -9})"));
  EXPECT_FALSE(sig(R"({"signal": "term"})"));
  EXPECT_FALSE(sig(R"({"signal": "BOGUS"})"));
  EXPECT_FALSE(sig(R"({})"));
  EXPECT_FALSE(sig(R"({"signal": "TERM", "extra": 1})"));
}

TEST(Processes, ProcStatusAndCmdline) {
  auto st = jail::parse_proc_status(
      "Name:\tmy prog\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t4242\nNgid:\t0\nPid:\t4242\nPPid:\t4000\n"
      "Uid:\t268436456\t268436457\t268436456\t268436456\nGid:\t1\t1\t1\t1\nNSpid:\t4242\t7\nNSpgid:\t4242\t7\n");
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->name, "my prog");
  EXPECT_EQ(st->nspid, (std::vector<pid_t>{4242, 7}));
  EXPECT_EQ(st->ppid, 4000);
  EXPECT_EQ(st->euid, 268436457u);
  EXPECT_FALSE(jail::parse_proc_status("Name:\tx\nPPid:\t1\n"));  // no NSpid, no Uid
  EXPECT_FALSE(jail::parse_proc_status("NSpid:\t12 x\nPPid:\t1\nUid:\t0\t0\t0\t0\n"));
  EXPECT_EQ(jail::split_cmdline(std::string("sleep\0" "30\0", 9)), (std::vector<std::string>{"sleep", "30"}));
  EXPECT_EQ(jail::split_cmdline(std::string("a\0\0b", 4)), (std::vector<std::string>{"a", "", "b"}));
  EXPECT_EQ(jail::split_cmdline("rewritten title"), (std::vector<std::string>{"rewritten title"}));
  EXPECT_TRUE(jail::split_cmdline("").empty());
  EXPECT_EQ(jail::inside_uid(0x10000000 + 1000, 0x10000000), 1000u);
  EXPECT_EQ(jail::inside_uid(0x10000000, 0x10000000), 0u);
  EXPECT_EQ(jail::inside_uid(0, 0x10000000), 65534u);
  EXPECT_EQ(jail::inside_uid(0x10000000 + 65536, 0x10000000), 65534u);
}
