// Pure pieces of the session core: exec outcome wording, the exec environment, JSON
// number text, encodings, admission waits.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>

#include "common/encoding.h"
#include "common/json_text.h"
#include "session/admission.h"
#include "session/exec_env.h"
#include "session/exec_outcome.h"
#include "store/store.h"

namespace cela::session {
namespace {

ExecObservation base_observation() {
  ExecObservation o;
  o.command = "python3";
  o.limits = {256ull << 20, 1, 64};
  o.timeout_ms = 5000;
  return o;
}

TEST(ExecOutcome, NormalExitAndSignal) {
  store::ExecRecord r;
  auto o = base_observation();
  o.wait_status = 3 << 8;  // exit 3
  classify_exec(o, r);
  EXPECT_EQ(r.state, "exited");
  EXPECT_EQ(r.exit_code, 3);
  o.wait_status = SIGSEGV;  // killed by a signal
  classify_exec(o, r);
  EXPECT_EQ(r.state, "killed");
  EXPECT_EQ(r.signal, SIGSEGV);
}

TEST(ExecOutcome, KilledOnRequestNamesTheSignal) {
  store::ExecRecord r;
  auto o = base_observation();
  o.wait_status = SIGTERM;
  o.kill_signal = SIGTERM;
  classify_exec(o, r);
  EXPECT_EQ(r.state, "killed");
  EXPECT_NE(r.reason.find("killed on request (SIGTERM"), std::string::npos) << r.reason;
}

TEST(ExecOutcome, InitDeathIsNotAKillOnRequest) {
  store::ExecRecord r;
  auto o = base_observation();
  o.session_ended = "init_died";
  o.kill_signal = SIGTERM;  // even with a kill pending, the init's death is what happened
  classify_exec(o, r);
  EXPECT_EQ(r.state, "failed");
  EXPECT_NE(r.reason.find("init process died"), std::string::npos) << r.reason;
  EXPECT_EQ(r.reason.find("request"), std::string::npos) << r.reason;
}

TEST(ExecOutcome, SessionEndNamesItsReason) {
  store::ExecRecord r;
  auto o = base_observation();
  o.session_ended = "daemon_shutdown";
  o.session_message = "the daemon stopped";
  classify_exec(o, r);
  EXPECT_EQ(r.state, "killed");
  EXPECT_NE(r.reason.find("daemon_shutdown"), std::string::npos) << r.reason;
  // An exec that had already exited keeps its own outcome.
  o.wait_status = 0;
  classify_exec(o, r);
  EXPECT_EQ(r.state, "exited");
}

TEST(ExecOutcome, StartFailures) {
  store::ExecRecord r;
  auto o = base_observation();
  o.start_failure = runtime::StartFailure{runtime::ExecStep::execve, ENOENT};
  classify_exec(o, r);
  EXPECT_EQ(r.state, "failed");
  EXPECT_EQ(r.exit_code, 127);
  EXPECT_NE(r.reason.find("command not found: python3"), std::string::npos) << r.reason;
  o.start_failure = runtime::StartFailure{runtime::ExecStep::chdir, ENOENT};
  classify_exec(o, r);
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_NE(r.reason.find("chdir"), std::string::npos) << r.reason;
}

TEST(ExecOutcome, TimeoutWordsTheExec) {
  store::ExecRecord r;
  auto o = base_observation();
  o.wait_status = SIGKILL;
  o.timed_out = true;
  o.timeout_ms = 1500;
  classify_exec(o, r);
  EXPECT_EQ(r.state, "timed_out");
  EXPECT_NE(r.reason.find("1.5 s"), std::string::npos) << r.reason;
}

TEST(ExecEnv, IdentityComesFromTheTemplate) {
  rootfs::TemplateUser account{"alice", 2001, 2002, "/srv/alice"};
  ExecEnvInput in;
  in.cmd = "id";
  auto p = process_spec(account, in);
  ASSERT_TRUE(p) << p.error().message();
  EXPECT_EQ(p->uid, 2001u);
  EXPECT_EQ(p->gid, 2002u);
  EXPECT_EQ(p->cwd, "/srv/alice");
  EXPECT_EQ(p->argv, (std::vector<std::string>{"/bin/sh", "-c", "id"}));
  EXPECT_NE(std::find(p->env.begin(), p->env.end(), "HOME=/srv/alice"), p->env.end());
  EXPECT_NE(std::find(p->env.begin(), p->env.end(), "USER=alice"), p->env.end());
  EXPECT_TRUE(p->no_new_privs);
  in.user = ExecUser::root;
  in.allow_sudo = true;
  p = process_spec(account, in);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->uid, 0u);
  EXPECT_EQ(p->cwd, "/root");
  EXPECT_FALSE(p->no_new_privs);
}

TEST(ExecEnv, LaterEnvironmentWinsAndBadEntriesAreRefused) {
  ExecEnvInput in;
  in.argv = {"env"};
  in.base_env = {"A=session", "TERM=xterm"};
  in.env = {"A=exec"};
  auto p = process_spec({}, in);
  ASSERT_TRUE(p);
  EXPECT_EQ(std::count_if(p->env.begin(), p->env.end(), [](auto& e) { return e.starts_with("A="); }), 1);
  EXPECT_NE(std::find(p->env.begin(), p->env.end(), "A=exec"), p->env.end());
  EXPECT_NE(std::find(p->env.begin(), p->env.end(), "TERM=xterm"), p->env.end());
  in.env = {"=x"};
  EXPECT_FALSE(process_spec({}, in));
  in.env = {};
  in.cmd = "also";
  EXPECT_FALSE(process_spec({}, in));  // argv and cmd
}

TEST(JsonText, NumbersArePlainDecimals) {
  boost::json::value v = boost::json::parse(R"({"a": 1.0, "b": 0.5, "c": [2.25, -3.0, 1e-7], "d": 12, "e": "1E0"})");
  EXPECT_EQ(json_text(v), R"({"a":1,"b":0.5,"c":[2.25,-3,0.0000001],"d":12,"e":"1E0"})");
  EXPECT_EQ(boost::json::parse(json_text(v)), boost::json::parse(R"({"a":1,"b":0.5,"c":[2.25,-3,1e-7],"d":12,"e":"1E0"})"));
}

TEST(Encoding, Base64HexUtf8) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("ab"), "YWI=");
  EXPECT_EQ(base64_decode("YWI="), "ab");
  EXPECT_FALSE(base64_decode("YWI"));
  EXPECT_FALSE(base64_decode("YW=="));  // non-canonical
  EXPECT_EQ(hex_encode("\x01\xff"), "01ff");
  EXPECT_TRUE(valid_utf8("h\xc3\xa9llo"));
  EXPECT_FALSE(valid_utf8("\xc3"));
  EXPECT_FALSE(valid_utf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(valid_utf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(valid_utf8("\xf4\x90\x80\x80"));  // past U+10FFFF
}

TEST(Admission, WaitersAreServedInOrderOrTimeOut) {
  boost::asio::io_context io;
  Admission a(io, 1);
  std::vector<std::string> events;
  a.reserve(std::chrono::seconds(0), [&](Result<void> r) { events.push_back(r ? "first" : "first-refused"); });
  a.reserve(std::chrono::seconds(5), [&](Result<void> r) { events.push_back(r ? "second" : "second-refused"); });
  a.reserve(std::chrono::seconds(0), [&](Result<void> r) {
    events.push_back(r ? "third" : std::string("third-") + std::string(to_string(r.error().code)));
  });
  io.poll();
  EXPECT_EQ(events, (std::vector<std::string>{"first", "third-capacity_exceeded"}));
  a.release();  // the waiter gets the slot
  io.restart();
  io.poll();
  EXPECT_EQ(events.back(), "second");
  EXPECT_TRUE(a.full());
  // A bounded wait ends in the same error, on time.
  auto t0 = std::chrono::steady_clock::now();
  bool refused = false;
  a.reserve(std::chrono::seconds(1), [&](Result<void> r) { refused = !r; });
  io.restart();  // poll() ran out of work and stopped the context
  io.run_for(std::chrono::seconds(3));
  EXPECT_TRUE(refused);
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(900));
  EXPECT_LT(took, std::chrono::milliseconds(2500));
}

TEST(Admission, TenantQuotasCountLiveSessions) {
  auto dir = std::filesystem::temp_directory_path() / ("cela-admission-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  {
    auto store = store::Store::open((dir / "cela.db").string());
    ASSERT_TRUE(store) << store.error().message();
    auto tenant = (*store)->create_tenant("t", store::Quotas{2, 1024, 1.5});
    ASSERT_TRUE(tenant);
    auto live = [&](uint64_t memory_mb, const char* state = "ready") {
      store::SessionRecord r;
      r.id = store::new_id("s");
      r.tenant_id = tenant->id;
      r.state = state;
      r.template_ref = "host@1";
      r.limits.memory_mb = memory_mb;
      r.limits.cpus = 1;
      r.created_at = store::now_rfc3339();
      ASSERT_TRUE((*store)->insert_session(r));
    };
    SessionLimits limits;
    limits.memory_mb = 512;
    limits.cpus = 1;
    EXPECT_TRUE(Admission::check_quota(**store, *tenant, limits));
    limits.cpus = 2;  // max_cpus is a per-session ceiling
    auto cpus = Admission::check_quota(**store, *tenant, limits);
    ASSERT_FALSE(cpus);
    EXPECT_EQ(cpus.error().code, ErrorCode::quota_exceeded);
    EXPECT_NE(cpus.error().context.find("1.5 cpus per session"), std::string::npos) << cpus.error().context;
    limits.cpus = 1;
    live(768);
    auto memory = Admission::check_quota(**store, *tenant, limits);  // 768 + 512 > 1024
    ASSERT_FALSE(memory);
    EXPECT_NE(memory.error().context.find("MiB"), std::string::npos) << memory.error().context;
    limits.memory_mb = 256;
    EXPECT_TRUE(Admission::check_quota(**store, *tenant, limits));
    live(128, "terminated");  // ended sessions hold nothing
    EXPECT_TRUE(Admission::check_quota(**store, *tenant, limits));
    live(128);
    auto count = Admission::check_quota(**store, *tenant, limits);  // 2 of 2 live
    ASSERT_FALSE(count);
    EXPECT_NE(count.error().context.find("2 live sessions"), std::string::npos) << count.error().context;
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cela::session
