// Tty execs: the wire fields on both protocols (init's, HTTP's) and the environment.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>

#include "agent/protocol.h"
#include "api/session_specs.h"
#include "runtime/jail.h"
#include "session/exec_env.h"

using namespace cela;
namespace json = boost::json;

namespace {
json::object obj(std::string_view text) { return json::parse(text).as_object(); }

std::string env_of(const runtime::ProcessSpec& p, std::string_view key) {
  for (const auto& kv : p.env)
    if (kv.starts_with(std::string(key) + "=")) return kv.substr(key.size() + 1);
  return "<unset>";
}
}  // namespace

TEST(PtyProtocol, TtyAndSizeReachInit) {
  runtime::ProcessSpec spec;
  spec.argv = {"bash"};
  spec.tty = true;
  spec.cols = 132;
  spec.rows = 43;
  auto back = agent::ExecRequest::from_json(runtime::to_exec_request(spec).to_json());
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_TRUE(back->tty);
  EXPECT_EQ(back->cols, 132);
  EXPECT_EQ(back->rows, 43);
  // A request without the fields (an older host side) is a plain exec of 80x24.
  auto body = runtime::to_exec_request(spec).to_json();
  body.erase("tty");
  body.erase("cols");
  body.erase("rows");
  back = agent::ExecRequest::from_json(body);
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->tty);
  EXPECT_EQ(back->cols, 80);
  EXPECT_EQ(back->rows, 24);
  // A size that does not fit a winsize is malformed, not wrapped.
  body = runtime::to_exec_request(spec).to_json();
  body["cols"] = 70000;
  EXPECT_FALSE(agent::ExecRequest::from_json(body));
  EXPECT_EQ(agent::exec_step("pty"), agent::ExecStep::pty);
}

TEST(PtyEnv, TerminalGetsXtermUnlessTheExecSaysOtherwise) {
  session::ExecEnvInput in;
  in.argv = {"sh"};
  in.base_env = {"TERM=dumb-session"};
  auto p = session::process_spec({}, in);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->tty);
  EXPECT_EQ(env_of(*p, "TERM"), "dumb-session");
  in.tty = true;
  in.cols = 100;
  in.rows = 30;
  p = session::process_spec({}, in);
  ASSERT_TRUE(p);
  EXPECT_TRUE(p->tty);
  EXPECT_EQ(p->cols, 100);
  EXPECT_EQ(p->rows, 30);
  EXPECT_EQ(env_of(*p, "TERM"), "xterm-256color");
  EXPECT_EQ(std::count_if(p->env.begin(), p->env.end(), [](auto& e) { return e.starts_with("TERM="); }), 1);
  in.env = {"TERM=vt100"};
  p = session::process_spec({}, in);
  ASSERT_TRUE(p);
  EXPECT_EQ(env_of(*p, "TERM"), "vt100");
  in.tty = false;
  in.base_env.clear();
  in.env.clear();
  p = session::process_spec({}, in);
  EXPECT_EQ(env_of(*p, "TERM"), "dumb");
}

TEST(PtyApi, ExecBodyTakesTtyColsRowsWithinBounds) {
  session::DaemonConfig c;
  auto s = api::parse_exec(obj(R"({"cmd": "x", "tty": true})"), c);
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_TRUE(s->tty);
  EXPECT_EQ(s->cols, 80);
  EXPECT_EQ(s->rows, 24);
  s = api::parse_exec(obj(R"({"cmd": "x", "tty": true, "cols": 1000, "rows": 1})"), c);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->cols, 1000);
  EXPECT_EQ(s->rows, 1);
  for (auto bad : {R"({"cmd": "x", "tty": true, "cols": 0})", R"({"cmd": "x", "tty": true, "cols": 1001})",
                   R"({"cmd": "x", "tty": true, "rows": -3})", R"({"cmd": "x", "tty": true, "rows": 2.5})",
                   R"({"cmd": "x", "tty": true, "rows": "24"})", R"({"cmd": "x", "tty": 1})"}) {
    auto r = api::parse_exec(obj(bad), c);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << bad;
  }
}

TEST(PtyApi, ResizeNeedsBothSides) {
  auto r = api::parse_resize(obj(R"({"cols": 120, "rows": 40})"));
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, (std::pair<uint16_t, uint16_t>{120, 40}));
  for (auto bad : {R"({})", R"({"cols": 120})", R"({"rows": 40})", R"({"cols": 0, "rows": 40})",
                   R"({"cols": 120, "rows": 1001})", R"({"cols": 120, "rows": 40, "extra": 1})"})
    EXPECT_FALSE(api::parse_resize(obj(bad))) << bad;
}
