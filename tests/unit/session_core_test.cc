// Pure pieces of the session core: exec outcome wording, the exec environment, JSON
// number text, encodings, admission waits.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>

#include "common/encoding.h"
#include "common/json_text.h"
#include "common/json_fields.h"
#include "session/admission.h"
#include "session/config.h"
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

TEST(Admission, HostGrantsStayWithinCapacityTimesOvercommit) {
  boost::asio::io_context io;
  Admission a(io, 100);
  SessionLimits limits;  // 512 MiB, 256 pids
  HostGrant one = HostGrant::of(limits, 4096);
  EXPECT_EQ(one.files, 4096u * 256);
  EXPECT_TRUE(a.take(one));  // no host set: nothing checked
  a.give_back(one);

  AdmissionConfig ratios;
  ratios.memory_overcommit = 1.5;  // 1536 MiB
  ratios.pids_overcommit = 1;
  ratios.files_overcommit = 1;
  a.set_host({.memory_mb = 1024, .pids = 100000, .files = 1ull << 40}, ratios);
  EXPECT_TRUE(a.take(one));
  EXPECT_TRUE(a.take(one));
  EXPECT_TRUE(a.take(one));  // 1536 of 1536
  auto full = a.take(one);
  ASSERT_FALSE(full);
  EXPECT_EQ(full.error().code, ErrorCode::capacity_exceeded);
  EXPECT_NE(full.error().context.find("1536 MiB of session memory granted"), std::string::npos)
      << full.error().context;
  EXPECT_EQ(a.granted().memory_mb, 1536u);  // a refusal takes nothing
  a.give_back(one);
  EXPECT_TRUE(a.take(one));

  // pids and open files are tables of their own.
  Admission b(io, 100);
  b.set_host({.memory_mb = 1 << 20, .pids = 600, .files = 1ull << 40}, ratios);
  EXPECT_TRUE(b.take(one));
  EXPECT_TRUE(b.take(one));
  auto pids = b.take(one);
  ASSERT_FALSE(pids);
  EXPECT_NE(pids.error().context.find("session pids"), std::string::npos) << pids.error().context;
  Admission c(io, 100);
  c.set_host({.memory_mb = 1 << 20, .pids = 1 << 20, .files = 3 * one.files - 1}, ratios);
  EXPECT_TRUE(c.take(one));
  EXPECT_TRUE(c.take(one));
  auto files = c.take(one);
  ASSERT_FALSE(files);
  EXPECT_NE(files.error().context.find("open files"), std::string::npos) << files.error().context;
  // A huge request never wraps around.
  EXPECT_FALSE(c.take({.memory_mb = 0, .pids = 0, .files = UINT64_MAX}));
}

TEST(Admission, HostCapacityIsMeasuredUnderProcOrConfigured) {
  auto proc = std::filesystem::temp_directory_path() / ("cela-proc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(proc / "sys/kernel");
  std::filesystem::create_directories(proc / "sys/fs");
  std::ofstream(proc / "meminfo") << "MemTotal:       24683924 kB\nMemFree:        21779000 kB\n";
  std::ofstream(proc / "sys/kernel/pid_max") << "32768\n";
  std::ofstream(proc / "sys/kernel/threads-max") << "192726\n";
  std::ofstream(proc / "sys/fs/file-max") << "2466126\n";
  auto c = HostCapacity::measure({}, proc.string());
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->memory_mb, 24683924u / 1024);
  EXPECT_EQ(c->pids, 32768u);
  EXPECT_EQ(c->files, 2466126u);
  AdmissionConfig set;
  set.host_memory_mb = 1000;
  set.host_files = 7;
  c = HostCapacity::measure(set, proc.string());
  ASSERT_TRUE(c);
  EXPECT_EQ(c->memory_mb, 1000u);
  EXPECT_EQ(c->pids, 32768u);
  EXPECT_EQ(c->files, 7u);
  std::filesystem::remove(proc / "meminfo");
  EXPECT_FALSE(HostCapacity::measure({}, proc.string()));
  std::filesystem::remove_all(proc);
}

// Warm pools: limits not given are the defaults (so a create asking for none matches),
// and a shape no create could ask for, or two pools of one shape, are refused.
TEST(DaemonConfigPools, PoolsTakeTheDefaultsAndBadShapesAreRefused) {
  auto load = [](std::string_view text) {
    auto o = parse_json_object(text);
    EXPECT_TRUE(o) << text;
    return DaemonConfig::from_json(*o);
  };
  auto c = load(R"({"defaults": {"memory_mb": 300},
                   "pools": [{"template": "base", "size": 4},
                             {"template": "base", "size": 1, "limits": {"memory_mb": 1024, "cpus": 2}}]})");
  ASSERT_TRUE(c) << c.error().message();
  ASSERT_EQ(c->pools.size(), 2u);
  EXPECT_EQ(c->pools[0].template_name, "base");
  EXPECT_EQ(c->pools[0].size, 4u);
  EXPECT_EQ(c->pools[0].memory_mb, 300u);
  EXPECT_EQ(c->pools[0].cpus, 1.0);
  EXPECT_EQ(c->pools[0].disk_mb, c->defaults.disk_mb);
  EXPECT_EQ(c->pools[1].memory_mb, 1024u);
  EXPECT_EQ(c->pools[1].cpus, 2.0);
  for (const char* bad : {R"({"pools": [{"size": 1}]})", R"({"pools": [{"template": "base", "size": 0}]})",
                          R"({"pools": [{"template": "base", "size": 1, "limits": {"memory_mb": 8}}]})",
                          R"({"pools": [{"template": "base", "size": 1, "limits": {"cpus": 64}}]})",
                          R"({"pools": [{"template": "base", "size": 1, "limits": {"ttl_s": 5}}]})",
                          R"({"pools": [{"template": "base", "size": 1}, {"template": "base", "size": 2}]})",
                          R"({"pools": [{"template": "base", "size": 1, "extra": true}]})", R"({"pools": [3]})"}) {
    auto r = load(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << bad;
    }
  }
}

TEST(DaemonConfigBudgets, SectionsParseAndBadValuesAreRefused) {
  auto load = [](std::string_view text) {
    auto o = parse_json_object(text);
    EXPECT_TRUE(o) << text;
    return DaemonConfig::from_json(*o);
  };
  auto c = load(R"({"session_budgets": {"sigpending": 100, "msgqueue_bytes": 4096, "memlock_bytes": 65536,
                                        "ptys": 8, "user_namespace": {"max_inotify_instances": 16}},
                   "block_io": {"weight": 200, "read_bps": 1048576, "devices": ["/var"]},
                   "admission": {"overcommit": {"memory": 1.5, "pids": 3, "files": 10},
                                 "host": {"memory_mb": 4096}}})");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->budgets.sigpending, 100u);
  EXPECT_EQ(c->budgets.msgqueue_bytes, 4096u);
  EXPECT_EQ(c->budgets.memlock_bytes, 65536u);
  EXPECT_EQ(c->budgets.ptys, 8u);
  EXPECT_EQ(c->budgets.user_namespace, (std::map<std::string, uint64_t>{{"max_inotify_instances", 16}}));
  EXPECT_EQ(c->block_io.weight, 200u);
  EXPECT_EQ(c->block_io.read_bps, 1048576u);
  EXPECT_EQ(c->block_io.devices, std::vector<std::string>{"/var"});
  EXPECT_EQ(c->admission.memory_overcommit, 1.5);
  EXPECT_EQ(c->admission.pids_overcommit, 3);
  EXPECT_EQ(c->admission.files_overcommit, 10);
  EXPECT_EQ(c->admission.host_memory_mb, 4096u);
  auto d = load("{}");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->budgets.ptys, 64u);
  EXPECT_EQ(d->admission.memory_overcommit, 2.0);
  for (const char* bad : {R"({"session_budgets": {"ptys": 0}})", R"({"session_budgets": {"pty": 8}})",
                          R"({"session_budgets": {"user_namespace": {"max_inotify_instances": -1}}})",
                          R"({"block_io": {"weight": 20000}})", R"({"admission": {"overcommit": {"memory": 0}}})",
                          R"({"admission": {"overcommit": {"disk": 2}}})"}) {
    auto r = load(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << bad;
    }
  }
}

}  // namespace
}  // namespace cela::session
