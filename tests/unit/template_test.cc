// Template store, layer digest, mirror discovery, base recipe and the host template.
// No debootstrap here: the real base build runs in `make test` and integration tests.
#include "rootfs/template.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

#include "common/fs.h"
#include "rootfs/base_template.h"

using namespace cela;
using namespace cela::rootfs;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl =
        std::filesystem::temp_directory_path().string() + "/cela-template-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void put(const std::string& path, const std::string& content) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr) << path;
  std::fputs(content.c_str(), f);
  std::fclose(f);
}

std::string get(const std::string& path) {
  auto text = read_file(path);
  return text ? *text : "<" + text.error().message() + ">";
}

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

Template demo_manifest(const std::string& version, const std::string& layer) {
  Template t;
  t.name = "demo";
  t.version = version;
  t.digest = layer_digest(layer).value();
  t.built_at = "2026-11-29T10:05:00Z";
  t.layers = {layer};
  t.packages = {"bash=5.2.15-2+b7", "sudo=1.9.13p3-1+deb12u1"};
  t.binds = {{"/usr", "/usr"}};
  t.allow_sudo = true;
  t.recipe = "ab12";
  return t;
}

}  // namespace

TEST(TemplateStore, CommitLoadRoundTrip) {
  TempDir tmp;
  TemplateStore store{tmp.path() + "/templates", tmp.path() + "/cache"};

  auto staged = StagedVersion::create(store, "demo");
  ASSERT_TRUE(staged) << staged.error().message();
  put(staged->layer_dir() + "/etc/motd", "hello\n");
  Template manifest = demo_manifest("v1", staged->layer_dir());
  auto committed = staged->commit(manifest);
  ASSERT_TRUE(committed) << committed.error().message();

  EXPECT_EQ(lstat_of(store.root).st_mode & 07777, 0700u);
  EXPECT_EQ(get(store.root + "/demo/current"), "v1\n");
  for (const auto& name : entries(store.root + "/demo"))
    EXPECT_FALSE(name.starts_with(".staging-")) << name;

  // On disk the layer is relative to the version dir...
  auto on_disk = boost::json::parse(get(store.root + "/demo/v1/manifest.json")).as_object();
  EXPECT_EQ(on_disk.at("layers").as_array().at(0).as_string(), "layer");
  EXPECT_EQ(on_disk.at("recipe").as_string(), "ab12");
  EXPECT_EQ(on_disk.at("binds").as_array().at(0).as_object().at("target").as_string(), "/usr");

  // ...and loaded as an absolute path.
  auto loaded = load_template(store, "demo");
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(loaded->layers, std::vector<std::string>{store.root + "/demo/v1/layer"});
  EXPECT_EQ(get(loaded->layers[0] + "/etc/motd"), "hello\n");
  EXPECT_EQ(loaded->name, "demo");
  EXPECT_EQ(loaded->version, "v1");
  EXPECT_EQ(loaded->digest, manifest.digest);
  EXPECT_TRUE(loaded->digest.starts_with("sha256:"));
  EXPECT_EQ(loaded->built_at, manifest.built_at);
  EXPECT_EQ(loaded->packages, manifest.packages);
  ASSERT_EQ(loaded->binds.size(), 1u);
  EXPECT_EQ(loaded->binds[0].source, "/usr");
  EXPECT_TRUE(loaded->allow_sudo);
  EXPECT_FALSE(loaded->dev_only);
  EXPECT_EQ(loaded->recipe, "ab12");
  EXPECT_EQ(*layer_digest(loaded->layers[0]), manifest.digest);
}

TEST(TemplateStore, AliasesAndStartCommandInTheManifest) {
  TempDir tmp;
  TemplateStore store{tmp.path() + "/templates", tmp.path() + "/cache"};
  auto staged = StagedVersion::create(store, "demo");
  ASSERT_TRUE(staged) << staged.error().message();
  put(staged->layer_dir() + "/etc/motd", "hello\n");
  Template manifest = demo_manifest("v1", staged->layer_dir());
  manifest.aliases = {"demo-v1"};
  manifest.start = StartCommand{"exec srv --port 9", "user", 9, 20};
  ASSERT_TRUE(staged->commit(manifest));

  auto loaded = load_template(store, "demo");
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(loaded->aliases, std::vector<std::string>{"demo-v1"});
  ASSERT_TRUE(loaded->start);
  EXPECT_EQ(loaded->start->cmd, "exec srv --port 9");
  EXPECT_EQ(loaded->start->ready_port, 9);
  EXPECT_EQ(loaded->start->ready_timeout_s, 20u);

  // The alias finds the template, current version and by version; other names do not.
  auto by_alias = load_template(store, "demo-v1");
  ASSERT_TRUE(by_alias) << by_alias.error().message();
  EXPECT_EQ(by_alias->name, "demo");
  EXPECT_EQ(by_alias->version, "v1");
  auto versioned = load_template_version(store, "demo-v1", "v1");
  ASSERT_TRUE(versioned) << versioned.error().message();
  EXPECT_EQ(versioned->name, "demo");
  EXPECT_EQ(alias_target(store, "demo-v1"), std::optional<std::string>("demo"));
  auto missing = load_template(store, "demo-v2");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_FALSE(alias_target(store, "demo"));
}

TEST(TemplateStore, NewVersionBecomesCurrentOldOneStays) {
  TempDir tmp;
  TemplateStore store{tmp.path() + "/templates", tmp.path() + "/cache"};
  for (const char* version : {"v1", "v2"}) {
    auto staged = StagedVersion::create(store, "demo");
    ASSERT_TRUE(staged);
    put(staged->layer_dir() + "/version", version);
    ASSERT_TRUE(staged->commit(demo_manifest(version, staged->layer_dir())));
  }
  EXPECT_EQ(load_template(store, "demo")->version, "v2");
  auto v1 = load_template_version(store, "demo", "v1");
  ASSERT_TRUE(v1);
  EXPECT_EQ(get(v1->layers[0] + "/version"), "v1");

  auto listed = list_templates(store);
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].version, "v2");

  // An existing version is never overwritten.
  auto staged = StagedVersion::create(store, "demo");
  ASSERT_TRUE(staged);
  auto again = staged->commit(demo_manifest("v1", staged->layer_dir()));
  EXPECT_FALSE(again);

  ASSERT_TRUE(set_current_version(store, "demo", "v1"));
  EXPECT_EQ(load_template(store, "demo")->version, "v1");
  EXPECT_FALSE(set_current_version(store, "demo", "v9"));
}

TEST(TemplateStore, UncommittedStagingIsRemoved) {
  TempDir tmp;
  TemplateStore store{tmp.path() + "/templates", tmp.path() + "/cache"};
  std::string dir;
  {
    auto staged = StagedVersion::create(store, "demo");
    ASSERT_TRUE(staged);
    dir = staged->dir();
    put(staged->layer_dir() + "/a/b", "x");
    EXPECT_TRUE(exists(dir + "/layer/a/b"));
  }
  EXPECT_FALSE(exists(dir));
  EXPECT_FALSE(load_template(store, "demo"));
}

TEST(TemplateStore, MissingAndMalformed) {
  TempDir tmp;
  TemplateStore store{tmp.path() + "/templates", tmp.path() + "/cache"};
  auto missing = load_template(store, "nope");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_TRUE(list_templates(store)->empty());

  for (const char* bad : {"", "../etc", "a/b", ".hidden", "-x"}) {
    auto r = load_template(store, bad);
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << bad;
    EXPECT_FALSE(valid_template_name(bad)) << bad;
  }
  EXPECT_TRUE(valid_template_name("2026.11.29-1"));
  EXPECT_TRUE(valid_template_name("host-0123456789ab"));

  put(store.root + "/broken/current", "v1\n");
  put(store.root + "/broken/v1/manifest.json", "{\"name\": \"broken\"");
  auto broken = load_template(store, "broken");
  ASSERT_FALSE(broken);
  EXPECT_EQ(broken.error().code, ErrorCode::internal);
  put(store.root + "/broken/v1/manifest.json",
      R"({"name":"other","version":"v1","digest":"sha256:00","built_at":"x","layers":["layer"]})");
  EXPECT_FALSE(load_template(store, "broken"));
  EXPECT_TRUE(list_templates(store)->empty());  // unloadable templates are skipped
}

TEST(TemplateStore, JsonHasEveryField) {
  Template t = {};
  t.name = "x";
  t.version = "1";
  t.dev_only = true;
  t.layers = {"/a"};
  auto obj = boost::json::parse(template_to_json(t)).as_object();
  for (const char* key : {"name", "version", "digest", "built_at", "packages", "allow_sudo",
                          "dev_only", "layers", "binds", "recipe"})
    EXPECT_TRUE(obj.contains(key)) << key;
  EXPECT_TRUE(obj.at("dev_only").as_bool());
}

class LayerDigest : public ::testing::Test {
 protected:
  void make_tree(const std::string& root) {
    put(root + "/etc/passwd", "root:x:0:0::/root:/bin/bash\n");
    put(root + "/usr/bin/tool", "#!/bin/sh\necho hi\n");
    ::chmod((root + "/usr/bin/tool").c_str(), 0755);
    std::filesystem::create_directories(root + "/tmp");
    ::chmod((root + "/tmp").c_str(), 01777);
    ASSERT_EQ(::symlink("usr/bin", (root + "/bin").c_str()), 0);
    put(root + "/empty", "");
  }
  std::string digest(const std::string& dir) {
    auto d = layer_digest(dir);
    EXPECT_TRUE(d) << d.error().message();
    return d ? *d : "";
  }
  TempDir tmp;
  std::string a = tmp.path() + "/a";
  std::string b = tmp.path() + "/b";
};

TEST_F(LayerDigest, SameTreeSameDigest) {
  make_tree(a);
  make_tree(b);
  std::string da = digest(a);
  EXPECT_TRUE(da.starts_with("sha256:"));
  EXPECT_EQ(da.size(), 7u + 64u);
  EXPECT_EQ(da, digest(a));
  EXPECT_EQ(da, digest(b));  // where the tree lives and when it was made do not count
}

TEST_F(LayerDigest, ChangesWithContentModeLinkAndName) {
  make_tree(a);
  std::string base = digest(a);

  put(a + "/etc/passwd", "root:x:0:0::/root:/bin/sh\n");
  std::string changed_byte = digest(a);
  EXPECT_NE(changed_byte, base);
  put(a + "/etc/passwd", "root:x:0:0::/root:/bin/bash\n");
  EXPECT_EQ(digest(a), base);

  ::chmod((a + "/usr/bin/tool").c_str(), 04755);
  EXPECT_NE(digest(a), base);
  ::chmod((a + "/usr/bin/tool").c_str(), 0755);
  EXPECT_EQ(digest(a), base);

  ::unlink((a + "/bin").c_str());
  ASSERT_EQ(::symlink("usr/sbin", (a + "/bin").c_str()), 0);
  EXPECT_NE(digest(a), base);
  ::unlink((a + "/bin").c_str());
  put(a + "/bin", "usr/bin");  // a file holding the link's target is not the link
  EXPECT_NE(digest(a), base);
  ::unlink((a + "/bin").c_str());
  ASSERT_EQ(::symlink("usr/bin", (a + "/bin").c_str()), 0);
  EXPECT_EQ(digest(a), base);

  ::rename((a + "/empty").c_str(), (a + "/empty2").c_str());
  EXPECT_NE(digest(a), base);
  ::rename((a + "/empty2").c_str(), (a + "/empty").c_str());
  EXPECT_EQ(digest(a), base);

  put(a + "/tmp/new", "");
  EXPECT_NE(digest(a), base);
  ::unlink((a + "/tmp/new").c_str());
  EXPECT_EQ(digest(a), base);

  ::chmod(a.c_str(), 0700);  // the root's own mode is what `/` shows
  EXPECT_NE(digest(a), base);
  ::chmod(a.c_str(), 0755);

  if (::geteuid() == 0) {
    ASSERT_EQ(::lchown((a + "/etc/passwd").c_str(), 1000, 1000), 0);
    EXPECT_NE(digest(a), base);
    ASSERT_EQ(::lchown((a + "/etc/passwd").c_str(), ::geteuid(), ::getegid()), 0);
    EXPECT_EQ(digest(a), base);
  }
}

TEST_F(LayerDigest, DoesNotFollowSymlinks) {
  make_tree(a);
  std::string outside = tmp.path() + "/outside";
  put(outside + "/secret", "1");
  ASSERT_EQ(::symlink(outside.c_str(), (a + "/escape").c_str()), 0);
  std::string before = digest(a);
  put(outside + "/secret", "2");
  EXPECT_EQ(digest(a), before);
  EXPECT_FALSE(layer_digest(tmp.path() + "/missing"));
  EXPECT_FALSE(layer_digest(a + "/escape"));  // the root itself must be a real directory
}

TEST(DebianMirror, FromDeb822Sources) {
  TempDir tmp;
  put(tmp.path() + "/sources.list.d/debian.sources",
      "Types: deb\n"
      "# http://comment.invalid/debian is only a comment\n"
      "URIs: http://security.invalid/debian-security\n"
      "Suites: bookworm-security\n"
      "Components: main\n"
      "\n"
      "Types: deb-src\n"
      "URIs: http://source.invalid/debian\n"
      "Suites: bookworm\n"
      "\n"
      "Types: deb\n"
      "URIs: http://off.invalid/debian\n"
      "Suites: bookworm\n"
      "Enabled: no\n"
      "\n"
      "Types: deb\n"
      "URIs: http://mirror.invalid/debian\n"
      "Suites: bookworm bookworm-updates\n"
      "Components: main\n"
      "Signed-By:\n"
      " -----BEGIN PGP PUBLIC KEY BLOCK-----\n"
      " .\n"
      " -----END PGP PUBLIC KEY BLOCK-----\n");
  put(tmp.path() + "/sources.list.d/other.sources.disabled",
      "Types: deb\nURIs: http://disabled.invalid/debian\nSuites: bookworm\n");
  auto mirror = debian_mirror_from_apt(tmp.path(), "bookworm");
  ASSERT_TRUE(mirror) << mirror.error().message();
  EXPECT_EQ(*mirror, "http://mirror.invalid/debian");

  EXPECT_EQ(*debian_mirror_from_apt(tmp.path(), "bookworm-security"),
            "http://security.invalid/debian-security");
  auto none = debian_mirror_from_apt(tmp.path(), "trixie");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::not_found);
}

TEST(DebianMirror, FromOneLineSources) {
  TempDir tmp;
  put(tmp.path() + "/sources.list",
      "# deb http://commented.invalid/debian bookworm main\n"
      "deb-src http://source.invalid/debian bookworm main\n"
      "deb http://security.invalid/debian-security bookworm-security main\n"
      "deb [arch=amd64 signed-by=/usr/share/keyrings/x.gpg] http://mirror.invalid/debian bookworm "
      "main\n");
  EXPECT_EQ(*debian_mirror_from_apt(tmp.path(), "bookworm"), "http://mirror.invalid/debian");

  TempDir spaced;
  put(spaced.path() + "/sources.list.d/extra.list",
      "deb [ arch=amd64 trusted=yes ] http://spaced.invalid/debian bookworm main # trailing\n");
  EXPECT_EQ(*debian_mirror_from_apt(spaced.path(), "bookworm"), "http://spaced.invalid/debian");

  TempDir empty;
  EXPECT_FALSE(debian_mirror_from_apt(empty.path(), "bookworm"));
}

TEST(DebianMirror, OptionThenEnvironmentThenApt) {
  BaseBuildOptions options;
  options.mirror = "http://option.invalid/debian";
  ::setenv("CELA_DEBIAN_MIRROR", "http://env.invalid/debian", 1);
  EXPECT_EQ(*resolve_debian_mirror(options), "http://option.invalid/debian");
  options.mirror.clear();
  EXPECT_EQ(*resolve_debian_mirror(options), "http://env.invalid/debian");
  ::unsetenv("CELA_DEBIAN_MIRROR");
}

TEST(BaseRecipe, ChangesWithPackagesAndSuiteOnly) {
  std::vector<std::string> packages = base_packages();
  ASSERT_TRUE(std::is_sorted(packages.begin(), packages.end()));
  for (const char* needed : {"python3", "python3-pip", "python3-venv", "nodejs", "npm", "git",
                             "curl", "ca-certificates", "sudo", "procps"})
    EXPECT_NE(std::find(packages.begin(), packages.end(), needed), packages.end()) << needed;

  std::string recipe = base_recipe("bookworm", packages);
  EXPECT_EQ(recipe.size(), 64u);
  EXPECT_EQ(recipe, base_recipe("bookworm", packages));

  std::vector<std::string> reversed(packages.rbegin(), packages.rend());
  EXPECT_EQ(recipe, base_recipe("bookworm", reversed));  // order does not matter

  auto more = packages;
  more.push_back("jq");
  EXPECT_NE(recipe, base_recipe("bookworm", more));
  auto fewer = packages;
  fewer.pop_back();
  EXPECT_NE(recipe, base_recipe("bookworm", fewer));
  EXPECT_NE(recipe, base_recipe("trixie", packages));
}

TEST(BaseRecipe, InstalledPackagesFromDpkgStatus) {
  TempDir tmp;
  put(tmp.path() + "/status",
      "Package: sudo\n"
      "Status: install ok installed\n"
      "Version: 1.9.13p3-1+deb12u1\n"
      "Description: Provide limited super user privileges\n"
      " Sudo is a program designed to allow a sysadmin to give limited root\n"
      " .\n"
      " privileges to users.\n"
      "\n"
      "Package: removed-one\n"
      "Status: deinstall ok config-files\n"
      "Version: 1.0\n"
      "\n"
      "Package: bash\n"
      "Status: install ok installed\n"
      "Version: 5.2.15-2+b7\n");
  auto packages = installed_packages(tmp.path() + "/status");
  ASSERT_TRUE(packages) << packages.error().message();
  EXPECT_EQ(*packages, (std::vector<std::string>{"bash=5.2.15-2+b7", "sudo=1.9.13p3-1+deb12u1"}));
  EXPECT_FALSE(installed_packages(tmp.path() + "/missing"));
}

TEST(HostTemplate, GeneratedLayerHasOnlyWhatItShould) {
  if (::geteuid() != 0) GTEST_SKIP() << "the host template chowns /home/user to 1000: needs root";
  TempDir tmp;
  TemplateStore store{tmp.path() + "/templates", tmp.path() + "/cache"};

  auto t = load_template(store, "host");  // generated on first use
  ASSERT_TRUE(t) << t.error().message();
  EXPECT_EQ(t->name, "host");
  EXPECT_TRUE(t->version.starts_with("host-")) << t->version;
  EXPECT_EQ(t->version.size(), 5u + 12u);
  EXPECT_TRUE(t->dev_only);
  EXPECT_FALSE(t->allow_sudo);
  ASSERT_EQ(t->binds.size(), 1u);
  EXPECT_EQ(t->binds[0].source, "/usr");
  EXPECT_EQ(t->binds[0].target, "/usr");
  ASSERT_EQ(t->layers.size(), 1u);
  const std::string layer = t->layers[0];
  EXPECT_EQ(layer, store.root + "/host/" + t->version + "/layer");
  EXPECT_EQ(*layer_digest(layer), t->digest);

  std::string passwd = get(layer + "/etc/passwd");
  EXPECT_NE(passwd.find("root:x:0:0:root:/root:/bin/bash\n"), std::string::npos);
  EXPECT_NE(passwd.find("user:x:1000:1000::/home/user:/bin/bash\n"), std::string::npos);
  EXPECT_NE(passwd.find("nobody:x:65534:65534::/nonexistent:/usr/sbin/nologin\n"),
            std::string::npos);
  std::string group = get(layer + "/etc/group");
  EXPECT_NE(group.find("root:x:0:\n"), std::string::npos);
  EXPECT_NE(group.find("user:x:1000:\n"), std::string::npos);
  EXPECT_NE(group.find("nogroup:x:65534:\n"), std::string::npos);
  EXPECT_NE(get(layer + "/etc/hosts").find("127.0.0.1"), std::string::npos);
  EXPECT_NE(get(layer + "/etc/nsswitch.conf").find("passwd:   files"), std::string::npos);

  // Nothing else from the host's /etc: no secrets, no resolver.
  EXPECT_EQ(entries(layer + "/etc"),
            (std::vector<std::string>{"alternatives", "group", "hostname", "hosts", "ld.so.cache",
                                      "nsswitch.conf", "passwd"}));
  EXPECT_FALSE(exists(layer + "/etc/shadow"));
  EXPECT_FALSE(exists(layer + "/etc/resolv.conf"));
  EXPECT_EQ(get(layer + "/etc/ld.so.cache"), get("/etc/ld.so.cache"));
  for (const auto& name : entries(layer + "/etc/alternatives")) {
    std::string copied = layer + "/etc/alternatives/" + name;
    EXPECT_TRUE(S_ISLNK(lstat_of(copied).st_mode)) << name;
    EXPECT_EQ(std::filesystem::read_symlink(copied),
              std::filesystem::read_symlink("/etc/alternatives/" + name));
  }

  for (const char* name : {"bin", "sbin", "lib", "lib64"}) {
    std::string host = std::string("/") + name;
    if (!std::filesystem::is_symlink(host)) continue;
    EXPECT_EQ(std::filesystem::read_symlink(layer + host), std::filesystem::read_symlink(host))
        << name;
  }

  struct stat home = lstat_of(layer + "/home/user");
  EXPECT_TRUE(S_ISDIR(home.st_mode));
  EXPECT_EQ(home.st_uid, 1000u);
  EXPECT_EQ(home.st_gid, 1000u);
  EXPECT_EQ(home.st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_of(layer + "/tmp").st_mode & 07777, 01777u);
  EXPECT_EQ(lstat_of(layer + "/var/tmp").st_mode & 07777, 01777u);
  EXPECT_EQ(lstat_of(layer + "/root").st_mode & 07777, 0700u);
  EXPECT_EQ(lstat_of(layer + "/run").st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_of(layer).st_uid, 0u);
  for (const char* dir : {"usr", "proc", "dev"}) {
    EXPECT_TRUE(S_ISDIR(lstat_of(layer + "/" + dir).st_mode)) << dir;
    EXPECT_TRUE(entries(layer + "/" + dir).empty()) << dir;
  }

  // Regenerating an unchanged layer keeps the version.
  auto again = ensure_host_template(store);
  ASSERT_TRUE(again) << again.error().message();
  EXPECT_EQ(again->version, t->version);
  EXPECT_EQ(again->built_at, t->built_at);
  EXPECT_EQ(entries(store.root + "/host"),
            (std::vector<std::string>{".lock", "current", t->version}));
}
