// Template builds' plain logic (rootfs/build_spec.h) and the layer copy of snapshots
// and build steps (rootfs/layers.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

#include "common/fd.h"
#include "rootfs/build_spec.h"
#include "rootfs/layers.h"

namespace cela::rootfs {
namespace {

TEST(BuildSpec, DockerfileSubset) {
  const char* text =
      "# comment\n"
      "ARG VER=1.0\n"
      "FROM base\n"
      "ARG WHO\n"
      "ENV APP=/app NAME=\"x y\"\n"
      "RUN echo $VER ${WHO} \\\n"
      "    && echo done\n"
      "COPY src /app/\n"
      "WORKDIR /app\n"
      "USER user\n"
      "RUN [\"echo\", \"it's\"]\n"
      "CMD [\"python3\"]\n";
  auto spec = parse_dockerfile(text, {{"WHO", "me"}});
  ASSERT_TRUE(spec) << spec.error().message();
  EXPECT_EQ(spec->from, "base");
  ASSERT_EQ(spec->steps.size(), 6u);
  EXPECT_EQ(spec->steps[0].kind, StepKind::env);
  EXPECT_EQ(spec->steps[0].env[1], (std::pair<std::string, std::string>{"NAME", "x y"}));
  EXPECT_EQ(spec->steps[1].kind, StepKind::run);
  EXPECT_EQ(spec->steps[1].text, "echo 1.0 me  && echo done");
  EXPECT_EQ(spec->steps[1].line, 6);
  EXPECT_EQ(spec->steps[2].kind, StepKind::copy);
  EXPECT_EQ(spec->steps[2].sources, std::vector<std::string>{"src"});
  EXPECT_EQ(spec->steps[2].to, "/app/");
  EXPECT_EQ(spec->steps[3].kind, StepKind::workdir);
  EXPECT_EQ(spec->steps[4].kind, StepKind::user);
  EXPECT_EQ(spec->steps[5].text, "'echo' 'it'\\''s'");
  EXPECT_EQ(spec->notes.size(), 1u);  // CMD
}

TEST(BuildSpec, DockerfileRefusals) {
  EXPECT_FALSE(parse_dockerfile("RUN true\n", {}));                      // before FROM
  EXPECT_FALSE(parse_dockerfile("FROM base\nFROM base\n", {}));          // multi-stage
  EXPECT_FALSE(parse_dockerfile("FROM base AS b\n", {}));
  EXPECT_FALSE(parse_dockerfile("FROM base\nADD x /x\n", {}));
  EXPECT_FALSE(parse_dockerfile("FROM base\nCOPY --chown=1 a /a\n", {}));
  EXPECT_FALSE(parse_dockerfile("FROM base\nFOO bar\n", {}));
  EXPECT_FALSE(parse_dockerfile("# nothing\n", {}));
}

TEST(BuildSpec, JsonSteps) {
  auto body = boost::json::parse(
                  R"({"name":"t","from":"base","steps":[{"run":"true"},{"env":{"A":"1"}},)"
                  R"({"copy":{"archive_b64":"aGk=","to":"/x"}},{"workdir":"/w"},{"user":"user"}]})")
                  .as_object();
  auto spec = parse_build_json(body, false);
  ASSERT_TRUE(spec) << spec.error().message();
  ASSERT_EQ(spec->steps.size(), 5u);
  EXPECT_EQ(spec->steps[2].archive, "hi");
  auto src = boost::json::parse(R"({"steps":[{"copy":{"src":"dir","to":"/x"}}]})").as_object();
  EXPECT_FALSE(parse_build_json(src, false));  // the API reads no client paths
  EXPECT_TRUE(parse_build_json(src, true));
  auto relative = boost::json::parse(R"({"steps":[{"workdir":"w"}]})").as_object();
  EXPECT_FALSE(parse_build_json(relative, false));
  auto unknown = boost::json::parse(R"({"steps":[{"sh":"x"}]})").as_object();
  EXPECT_FALSE(parse_build_json(unknown, false));
}

TEST(BuildSpec, AliasesAndStartCommand) {
  auto body = boost::json::parse(
                  R"({"steps":[{"run":"true"}],"aliases":["ci-v1"],)"
                  R"("start":{"cmd":"exec server","user":"user","ready_port":49999,"ready_timeout_s":30}})")
                  .as_object();
  auto spec = parse_build_json(body, false);
  ASSERT_TRUE(spec) << spec.error().message();
  EXPECT_EQ(spec->aliases, std::vector<std::string>{"ci-v1"});
  ASSERT_TRUE(spec->start);
  EXPECT_EQ(spec->start->cmd, "exec server");
  EXPECT_EQ(spec->start->user, "user");
  EXPECT_EQ(spec->start->ready_port, 49999);
  EXPECT_EQ(spec->start->ready_timeout_s, 30u);
  for (const char* bad : {R"({"steps":[],"aliases":["../x"]})", R"({"steps":[],"start":{"cmd":""}})",
                          R"({"steps":[],"start":{"cmd":"x","ready_port":70000}})",
                          R"({"steps":[],"start":{"cmd":"x","ready_timeout_s":0}})",
                          R"({"steps":[],"start":{"cmd":"x","when":"boot"}})"}) {
    auto b = boost::json::parse(bad).as_object();
    EXPECT_FALSE(parse_build_json(b, false)) << bad;
  }
  auto plain = boost::json::parse(R"({"steps":[]})").as_object();
  auto p = parse_build_json(plain, false);
  ASSERT_TRUE(p);
  EXPECT_FALSE(p->start);
  EXPECT_EQ(p->start.value_or(StartCommand{}).ready_timeout_s, 60u);
}

TEST(BuildSpec, StepKeysDependOnParentContentAndContext) {
  BuildStep run;
  run.text = "echo hi";
  std::string k = step_key("p", run, "root");
  EXPECT_EQ(k, step_key("p", run, "root"));
  EXPECT_NE(k, step_key("q", run, "root"));
  EXPECT_NE(k, step_key("p", run, "user"));
  BuildStep other = run;
  other.text = "echo ho";
  EXPECT_NE(k, step_key("p", other, "root"));
  BuildStep copy_a;
  copy_a.kind = StepKind::copy;
  copy_a.archive = "a";
  copy_a.to = "/x";
  BuildStep copy_b = copy_a;
  copy_b.archive = "b";
  EXPECT_NE(step_key("p", copy_a, ""), step_key("p", copy_b, ""));
}

class LayerCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown, whiteouts)";
    char tmpl[] = "/tmp/cela-layer-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::filesystem::create_directories(dir_ + "/src/d/e");
    std::filesystem::create_directories(dir_ + "/dst");
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  std::string dir_;
};

TEST_F(LayerCopy, ShiftsOwnersKeepsWhiteoutsLinksAndOpaqueDirs) {
  const std::string src = dir_ + "/src";
  const uint32_t base = 200000;
  { std::ofstream(src + "/d/file") << "content"; }
  ASSERT_EQ(::chown((src + "/d/file").c_str(), base + 1000, base + 1000), 0);
  ASSERT_EQ(::chmod((src + "/d/file").c_str(), 04750), 0);
  ASSERT_EQ(::link((src + "/d/file").c_str(), (src + "/d/hard").c_str()), 0);
  ASSERT_EQ(::symlink("/etc/passwd", (src + "/d/link").c_str()), 0);
  ASSERT_EQ(::mknod((src + "/gone").c_str(), S_IFCHR | 0600, makedev(0, 0)), 0);  // whiteout
  ASSERT_EQ(::mknod((src + "/null").c_str(), S_IFCHR | 0600, makedev(1, 3)), 0);  // a real device
  ASSERT_EQ(::setxattr((src + "/d/e").c_str(), "trusted.overlay.opaque", "y", 1, 0), 0);
  ASSERT_EQ(::chown((src + "/d").c_str(), 7, 7), 0);  // outside the range: stored as 0
  UniqueFd fd(::open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto bytes = copy_layer_tree(fd.get(), dir_ + "/dst", {base, 65536});
  ASSERT_TRUE(bytes) << bytes.error().message();
  EXPECT_EQ(*bytes, 7u);  // the hard link is not counted twice
  const std::string dst = dir_ + "/dst";
  struct stat st {}, st2 {};
  ASSERT_EQ(::lstat((dst + "/d/file").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_mode & 07777, 04750u);
  ASSERT_EQ(::lstat((dst + "/d/hard").c_str(), &st2), 0);
  EXPECT_EQ(st.st_ino, st2.st_ino);
  char target[64] = {};
  ASSERT_GT(::readlink((dst + "/d/link").c_str(), target, sizeof target), 0);
  EXPECT_STREQ(target, "/etc/passwd");
  ASSERT_EQ(::lstat((dst + "/gone").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == makedev(0, 0));
  EXPECT_NE(::lstat((dst + "/null").c_str(), &st), 0);  // devices never enter a layer
  char v[4] = {};
  EXPECT_EQ(::getxattr((dst + "/d/e").c_str(), "trusted.overlay.opaque", v, sizeof v), 1);
  ASSERT_EQ(::lstat((dst + "/d").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
}

TEST_F(LayerCopy, StagedLayersCommitOnceAndUnreferencedOnesAreCollected) {
  TemplateStore store{dir_ + "/store", dir_ + "/cache"};
  auto a = StagedLayer::create(store);
  ASSERT_TRUE(a) << a.error().message();
  { std::ofstream(a->dir() + "/x") << "1"; }
  auto path = a->commit("k1");
  ASSERT_TRUE(path) << path.error().message();
  ASSERT_TRUE(write_layer_meta(store, "k1", {"sha256:x", 1, "test"}));
  EXPECT_TRUE(read_layer_meta(store, "k1"));
  auto b = StagedLayer::create(store);
  ASSERT_TRUE(b);
  auto again = b->commit("k1");  // the key exists: the first one stays
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *path);
  // A version that refers to the layer keeps it; once removed, the layer goes too.
  Template t;
  t.layers = {*path};
  t.layer_meta = {{"sha256:x", 1, "test"}};
  auto v = commit_stacked_version(store, "t", t, "tenant");
  ASSERT_TRUE(v) << v.error().message();
  EXPECT_EQ(v->built_by, "tenant");
  auto kept = collect_layers(store);
  ASSERT_TRUE(kept);
  EXPECT_EQ(*kept, 0);
  ASSERT_TRUE(remove_version(store, "t", v->version));
  auto removed = collect_layers(store);
  ASSERT_TRUE(removed);
  EXPECT_EQ(*removed, 1);
  EXPECT_FALSE(read_layer_meta(store, "k1"));
  EXPECT_FALSE(std::filesystem::exists(*path));
}

}  // namespace
}  // namespace cela::rootfs

namespace cela::rootfs {
namespace {

TEST(PasswdAccount, OnlyUnprivilegedAccountsWithAbsoluteHomes) {
  auto u = passwd_account("app:x:1000:1001::/home/app:/bin/sh");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->name, "app");
  EXPECT_EQ(u->uid, 1000u);
  EXPECT_EQ(u->gid, 1001u);
  EXPECT_EQ(u->home, "/home/app");
  EXPECT_FALSE(passwd_account("root:x:0:0:root:/root:/bin/sh"));
  EXPECT_FALSE(passwd_account("big:x:70000:1:::/x"));
  EXPECT_FALSE(passwd_account("rel:x:5:5::home:/bin/sh"));
  EXPECT_FALSE(passwd_account("short:x:5:5"));
  EXPECT_FALSE(passwd_account("num:x:5a:5::/h:/bin/sh"));
}

}  // namespace
}  // namespace cela::rootfs
