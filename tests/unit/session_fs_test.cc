// SessionFs: the daemon's file layer, attacked the way sandbox code would. A temp dir
// plays the sandbox root; a sibling "outside" dir plays the host, holding a secret.
// Every planted symlink, tar entry and race target tries to reach "outside".
// Runs as root (owners, a tmpfs mount, a device node); the mount test skips without it.
#include "session/session_fs.h"

#include "common/sha256.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace cela;
using namespace cela::session;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kUid = 101000;
constexpr gid_t kGid = 101001;
const char kSecret[] = "host secret";

void put(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

std::string get(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool lexists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

struct stat lstat_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

void symlink_at(const std::string& target, const std::string& link) {
  fs::create_directories(fs::path(link).parent_path());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0) << link;
}

// Every file under `dir` (recursively, without following symlinks): rel -> content.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator();
       ++it) {
    std::string rel = fs::relative(it->path(), dir).string();
    auto status = it->symlink_status();
    if (fs::is_symlink(status))
      out[rel] = "link:" + fs::read_symlink(it->path()).string();
    else if (fs::is_regular_file(status))
      out[rel] = "file:" + get(it->path().string());
    else if (fs::is_directory(status))
      out[rel] = "dir";
    else
      out[rel] = "other";
  }
  return out;
}

// The comparable shape of a tree: type, permission bits, content or link target.
std::map<std::string, std::string> shape(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (auto& [rel, what] : snapshot(dir)) {
    struct stat st = lstat_of(dir + "/" + rel);
    char mode[16];
    std::snprintf(mode, sizeof mode, " %o", st.st_mode & 07777);
    out[rel] = what + (S_ISLNK(st.st_mode) ? "" : mode);
  }
  return out;
}

// ---- tar building and reading with the libarchive API ----

enum class Kind { file, dir, symlink, hardlink, chardev, fifo };
struct TarEntry {
  std::string name;
  Kind kind = Kind::file;
  std::string data;  // file content
  std::string link;  // symlink or hard link target
  unsigned perm = 0644;
};

TarEntry file(std::string name, std::string data, unsigned perm = 0644) {
  return TarEntry{std::move(name), Kind::file, std::move(data), "", perm};
}
TarEntry dir(std::string name, unsigned perm = 0755) {
  return TarEntry{std::move(name), Kind::dir, "", "", perm};
}
TarEntry symlink(std::string name, std::string target) {
  return TarEntry{std::move(name), Kind::symlink, "", std::move(target), 0777};
}
TarEntry hardlink(std::string name, std::string target) {
  return TarEntry{std::move(name), Kind::hardlink, "", std::move(target), 0644};
}
TarEntry special(std::string name, Kind kind) {
  return TarEntry{std::move(name), kind, "", "", 0644};
}

WriteOptions with_mode(uint32_t mode) {
  WriteOptions options;
  options.mode = mode;
  return options;
}
WriteOptions with_parents() {
  WriteOptions options;
  options.make_parents = true;
  return options;
}

la_ssize_t append_to_string(archive*, void* client, const void* buf, size_t len) {
  static_cast<std::string*>(client)->append(static_cast<const char*>(buf), len);
  return static_cast<la_ssize_t>(len);
}

std::string make_tar(const std::vector<TarEntry>& entries, bool gzip = false) {
  archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (gzip) archive_write_add_filter_gzip(a);
  std::string out;
  EXPECT_EQ(archive_write_open(a, &out, nullptr, append_to_string, nullptr), ARCHIVE_OK);
  for (const auto& t : entries) {
    archive_entry* e = archive_entry_new();
    archive_entry_copy_pathname(e, t.name.c_str());
    archive_entry_set_perm(e, t.perm);
    archive_entry_set_mtime(e, 1700000000, 0);
    switch (t.kind) {
      case Kind::file:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_size(e, static_cast<la_int64_t>(t.data.size()));
        break;
      case Kind::dir:
        archive_entry_set_filetype(e, AE_IFDIR);
        break;
      case Kind::symlink:
        archive_entry_set_filetype(e, AE_IFLNK);
        archive_entry_copy_symlink(e, t.link.c_str());
        break;
      case Kind::hardlink:
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_copy_hardlink(e, t.link.c_str());
        archive_entry_set_size(e, 0);
        break;
      case Kind::chardev:
        archive_entry_set_filetype(e, AE_IFCHR);
        archive_entry_set_rdev(e, makedev(1, 3));
        break;
      case Kind::fifo:
        archive_entry_set_filetype(e, AE_IFIFO);
        break;
    }
    EXPECT_GE(archive_write_header(a, e), ARCHIVE_WARN) << archive_error_string(a);
    if (t.kind == Kind::file && !t.data.empty()) {
      EXPECT_EQ(archive_write_data(a, t.data.data(), t.data.size()),
                static_cast<la_ssize_t>(t.data.size()));
    }
    archive_entry_free(e);
  }
  EXPECT_EQ(archive_write_close(a), ARCHIVE_OK);
  archive_write_free(a);
  return out;
}

struct ReadEntry {
  std::string name;
  unsigned type = 0;
  std::string link;
  std::string data;
};

std::vector<ReadEntry> read_tar(const std::string& tar) {
  archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  std::vector<ReadEntry> out;
  archive_entry* e = nullptr;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK) {
    ReadEntry r;
    r.name = archive_entry_pathname(e);
    if (r.name.size() > 1 && r.name.back() == '/') r.name.pop_back();  // tar marks directories
    r.type = archive_entry_filetype(e);
    if (archive_entry_symlink(e)) r.link = archive_entry_symlink(e);
    char buf[4096];
    for (la_ssize_t n; (n = archive_read_data(a, buf, sizeof buf)) > 0;)
      r.data.append(buf, static_cast<size_t>(n));
    out.push_back(std::move(r));
  }
  archive_read_free(a);
  return out;
}

// A source handing out `data` in small chunks, then EOF.
std::function<Result<std::string_view>()> chunks(const std::string& data, size_t size = 777) {
  auto pos = std::make_shared<size_t>(0);
  return [&data, pos, size]() -> Result<std::string_view> {
    size_t n = std::min(size, data.size() - *pos);
    std::string_view view(data.data() + *pos, n);
    *pos += n;
    return view;
  };
}

class SessionFsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = "/tmp/cela-fs-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    base_ = tmpl;
    root_ = base_ + "/root";
    outside_ = base_ + "/outside";
    fs::create_directories(root_ + "/home/user");
    fs::create_directories(root_ + "/etc");
    fs::create_directories(root_ + "/tmp");
    put(outside_ + "/secret", kSecret);
    // Canary: the attacks below would hit real host paths (/home/user, /etc, /tmp) if
    // resolution did not stay inside the fake root. Refuse to run them then.
    put(root_ + "/.canary", base_);
    auto sfs = make_fs();
    auto canary = sfs.read_file("/.canary");
    ASSERT_TRUE(canary && *canary == base_) << "SessionFs does not resolve inside its root";
    ASSERT_TRUE(sfs.write_file("/.canary-written", "x"));
    ASSERT_EQ(get(root_ + "/.canary-written"), "x") << "SessionFs does not write inside its root";
    fs::remove(root_ + "/.canary");
    fs::remove(root_ + "/.canary-written");
  }
  void TearDown() override {
    if (!mounted_.empty()) ::umount2(mounted_.c_str(), MNT_DETACH);
    fs::remove_all(base_);
  }

  SessionFs make_fs(FsLimits limits = {}, std::vector<std::string> writable = {"/"}) {
    int fd = ::open(root_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    EXPECT_GE(fd, 0);
    return SessionFs(UniqueFd(fd), kUid, kGid, limits, std::move(writable));
  }

  // The outside dir is exactly as SetUp made it.
  void expect_outside_untouched() {
    EXPECT_EQ(snapshot(outside_),
              (std::map<std::string, std::string>{{"secret", "file:host secret"}}));
  }

  // A relative symlink target that climbs far enough to reach the host's "/" from
  // anywhere in the fake root, then descends into the outside dir.
  std::string climb_to_outside() const { return "../../../../../../../../../.." + outside_; }

  std::string base_, root_, outside_, mounted_;
};

#define EXPECT_CODE(result, expected_code)                               \
  do {                                                                   \
    auto&& r_ = (result);                                                \
    ASSERT_FALSE(r_.has_value()) << "expected an error";                 \
    EXPECT_EQ(r_.error().code, (expected_code)) << r_.error().message(); \
  } while (0)

// ---- basic operations ----

TEST_F(SessionFsTest, WriteReadRoundTripWithSha256) {
  auto sfs = make_fs();
  auto w = sfs.write_file("/home/user/a.txt", "hello");
  ASSERT_TRUE(w) << w.error().message();
  EXPECT_EQ(w->path, "/home/user/a.txt");
  EXPECT_EQ(w->size, 5u);
  EXPECT_EQ(w->sha256, "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824");
  EXPECT_EQ(get(root_ + "/home/user/a.txt"), "hello");
  auto r = sfs.read_file("/home/user/a.txt");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, "hello");

  // Streaming upload, replacing the file atomically; no temp file is left behind.
  auto up = sfs.open_upload("/home/user/a.txt");
  ASSERT_TRUE(up) << up.error().message();
  ASSERT_TRUE(up->append("hel"));
  ASSERT_TRUE(up->append("lo!"));
  EXPECT_EQ(get(root_ + "/home/user/a.txt"), "hello");  // not replaced before commit
  auto c = up->commit();
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->size, 6u);
  EXPECT_EQ(get(root_ + "/home/user/a.txt"), "hello!");
  EXPECT_EQ(snapshot(root_ + "/home/user").size(), 1u);

  // An abandoned upload removes its temp file.
  {
    auto dropped = sfs.open_upload("/home/user/b.txt");
    ASSERT_TRUE(dropped);
    ASSERT_TRUE(dropped->append("x"));
    EXPECT_EQ(snapshot(root_ + "/home/user").size(), 2u);
  }
  EXPECT_EQ(snapshot(root_ + "/home/user").size(), 1u);
  EXPECT_FALSE(lexists(root_ + "/home/user/b.txt"));

  auto opened = sfs.open_read("/home/user/a.txt");
  ASSERT_TRUE(opened);
  EXPECT_EQ(opened->size, 6u);
}

TEST_F(SessionFsTest, MissingParentIsNotFoundUnlessMakeParents) {
  auto sfs = make_fs();
  EXPECT_CODE(sfs.write_file("/home/user/no/such/x", "x"), ErrorCode::not_found);
  EXPECT_FALSE(lexists(root_ + "/home/user/no"));
  auto w = sfs.write_file("/home/user/no/such/x", "x", with_parents());
  ASSERT_TRUE(w) << w.error().message();
  EXPECT_EQ(get(root_ + "/home/user/no/such/x"), "x");
  struct stat st = lstat_of(root_ + "/home/user/no/such");
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_uid, kUid);
  EXPECT_EQ(st.st_gid, kGid);
  // A file in the way of a parent.
  EXPECT_CODE(sfs.write_file("/home/user/no/such/x/y", "x", with_parents()),
              ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.read_file("/home/user/missing"), ErrorCode::not_found);
}

TEST_F(SessionFsTest, ModeAndOwnerApplied) {
  auto sfs = make_fs();
  ASSERT_TRUE(sfs.write_file("/home/user/default", "x"));
  ASSERT_TRUE(sfs.write_file("/home/user/private", "x", with_mode(0600)));
  ASSERT_TRUE(sfs.write_file("/home/user/suid", "x", with_mode(04755)));
  EXPECT_EQ(lstat_of(root_ + "/home/user/default").st_mode & 07777, 0644u);
  EXPECT_EQ(lstat_of(root_ + "/home/user/private").st_mode & 07777, 0600u);
  EXPECT_EQ(lstat_of(root_ + "/home/user/suid").st_mode & 07777, 0755u);  // setuid dropped
  for (const char* name : {"default", "private", "suid"}) {
    struct stat st = lstat_of(root_ + "/home/user/" + name);
    EXPECT_EQ(st.st_uid, kUid) << name;
    EXPECT_EQ(st.st_gid, kGid) << name;
  }
  // Rewriting without a mode keeps the file's mode.
  ASSERT_TRUE(sfs.write_file("/home/user/suid", "y"));
  EXPECT_EQ(lstat_of(root_ + "/home/user/suid").st_mode & 07777, 0755u);
  EXPECT_CODE(sfs.write_file("/home/user/bad", "x", with_mode(010000)),
              ErrorCode::invalid_argument);
}

TEST_F(SessionFsTest, PathsAreValidated) {
  auto sfs = make_fs();
  EXPECT_CODE(sfs.read_file(""), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.read_file("home/user/x"), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.read_file(std::string_view("/home/user/a\0b", 14)), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.read_file("/" + std::string(5000, 'a')), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.write_file("/", "x"), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.write_file("/home/user/..", "x"), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.write_file("/home/user/.", "x"), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.remove("/", true), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.read_file("/home/user"), ErrorCode::invalid_argument);  // a directory
  EXPECT_CODE(sfs.export_tar("relative", [](std::string_view) -> Result<void> { return {}; }),
              ErrorCode::invalid_argument);
}

// ---- escapes ----

TEST_F(SessionFsTest, ReadThroughLinkToSlashStaysInRoot) {
  symlink_at("/", root_ + "/home/user/rootlink");
  put(root_ + outside_ + "/secret", "sandbox copy");
  auto sfs = make_fs();
  auto r = sfs.read_file("/home/user/rootlink" + outside_ + "/secret");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, "sandbox copy");
  // The host's /etc/passwd exists; the fake root's does not.
  ASSERT_TRUE(lexists("/etc/passwd"));
  EXPECT_CODE(sfs.read_file("/home/user/rootlink/etc/passwd"), ErrorCode::not_found);
  // Listing through the link lists the fake root.
  auto l = sfs.list("/home/user/rootlink");
  ASSERT_TRUE(l) << l.error().message();
  std::vector<std::string> names;
  for (const auto& e : *l) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"etc", "home", "tmp"}));
}

TEST_F(SessionFsTest, DotDotAndRelativeLinksCannotEscape) {
  symlink_at(climb_to_outside(), root_ + "/home/user/up");
  symlink_at("../../../../../../../../../..", root_ + "/home/user/top");
  auto sfs = make_fs();
  EXPECT_CODE(sfs.read_file("/../../../../../../.." + outside_ + "/secret"), ErrorCode::not_found);
  EXPECT_CODE(sfs.read_file("/home/user/up/secret"), ErrorCode::not_found);
  EXPECT_CODE(sfs.read_file("/home/user/top" + outside_ + "/secret"), ErrorCode::not_found);
  EXPECT_CODE(sfs.stat("/home/user/top" + outside_), ErrorCode::not_found);
  // With a copy inside the fake root, the same paths reach the copy.
  put(root_ + outside_ + "/secret", "sandbox copy");
  auto r = sfs.read_file("/home/user/up/secret");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, "sandbox copy");
  r = sfs.read_file("/home/../../../.." + outside_ + "/secret");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, "sandbox copy");
  expect_outside_untouched();
}

TEST_F(SessionFsTest, WriteThroughDirLinkLandsInsideRoot) {
  symlink_at(outside_, root_ + "/home/user/dirlink");
  symlink_at(climb_to_outside(), root_ + "/home/user/rellink");
  auto sfs = make_fs();
  for (const char* link : {"dirlink", "rellink"}) {
    SCOPED_TRACE(link);
    const std::string dir = std::string("/home/user/") + link;
    EXPECT_CODE(sfs.write_file(dir + "/pwned", "x"), ErrorCode::not_found);
    EXPECT_CODE(sfs.mkdir(dir + "/d"), ErrorCode::not_found);
    // mkdir -p cannot create through a dangling link (like coreutils: "File exists").
    EXPECT_CODE(sfs.write_file(dir + "/pwned", "x", with_parents()), ErrorCode::not_found);
    EXPECT_CODE(sfs.mkdir(dir + "/d", true), ErrorCode::not_found);
  }
  expect_outside_untouched();
  // Once the link's target exists inside the fake root, writes land there.
  fs::create_directories(root_ + outside_);
  auto w = sfs.write_file("/home/user/dirlink/new/deep/pwned", "x", with_parents());
  ASSERT_TRUE(w) << w.error().message();
  EXPECT_EQ(get(root_ + outside_ + "/new/deep/pwned"), "x");
  EXPECT_EQ(lstat_of(root_ + outside_ + "/new/deep").st_uid, kUid);
  ASSERT_TRUE(sfs.write_file("/home/user/rellink/pwned2", "y"));
  EXPECT_EQ(get(root_ + outside_ + "/pwned2"), "y");
  ASSERT_TRUE(sfs.mkdir("/home/user/rellink/d2", true));
  EXPECT_TRUE(fs::is_directory(root_ + outside_ + "/d2"));
  expect_outside_untouched();
}

TEST_F(SessionFsTest, WriteOverFinalSymlinkReplacesTheLink) {
  symlink_at(outside_ + "/secret", root_ + "/home/user/abs");
  symlink_at(climb_to_outside() + "/secret", root_ + "/home/user/rel");
  auto sfs = make_fs();
  for (const char* name : {"abs", "rel"}) {
    auto w = sfs.write_file(std::string("/home/user/") + name, "overwritten");
    ASSERT_TRUE(w) << w.error().message();
    struct stat st = lstat_of(root_ + "/home/user/" + name);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << name;
    EXPECT_EQ(get(root_ + "/home/user/" + name), "overwritten");
  }
  expect_outside_untouched();
  // A streaming upload behaves the same.
  symlink_at(outside_ + "/secret", root_ + "/home/user/abs2");
  auto up = sfs.open_upload("/home/user/abs2");
  ASSERT_TRUE(up);
  ASSERT_TRUE(up->append("z"));
  ASSERT_TRUE(up->commit());
  expect_outside_untouched();
}

TEST_F(SessionFsTest, ReadFollowsFinalSymlinkInsideRoot) {
  put(root_ + "/etc/motd", "inside motd");
  symlink_at("/etc/motd", root_ + "/home/user/motd");
  auto sfs = make_fs();
  auto r = sfs.read_file("/home/user/motd");
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, "inside motd");
}

TEST_F(SessionFsTest, MountPointsAreNotCrossed) {
  fs::create_directories(root_ + "/mnt");
  if (::mount("tmpfs", (root_ + "/mnt").c_str(), "tmpfs", 0, "size=1m") != 0)
    GTEST_SKIP() << "cannot mount tmpfs: " << std::strerror(errno);
  mounted_ = root_ + "/mnt";
  put(root_ + "/mnt/file", "on another mount");
  auto sfs = make_fs();
  EXPECT_CODE(sfs.read_file("/mnt/file"), ErrorCode::permission_denied);
  EXPECT_CODE(sfs.write_file("/mnt/new", "x"), ErrorCode::permission_denied);
  EXPECT_CODE(sfs.list("/mnt"), ErrorCode::permission_denied);
  EXPECT_CODE(sfs.remove("/mnt", true), ErrorCode::permission_denied);
  // A symlink to the mount does not help.
  symlink_at("/mnt", root_ + "/home/user/mntlink");
  EXPECT_CODE(sfs.read_file("/home/user/mntlink/file"), ErrorCode::permission_denied);
  auto l = sfs.list("/", 3);
  ASSERT_TRUE(l) << l.error().message();
  bool saw_mnt = false;
  for (const auto& e : *l) {
    EXPECT_NE(e.path, "/mnt/file");
    saw_mnt |= e.path == "/mnt";
  }
  EXPECT_TRUE(saw_mnt);
  std::string tar;
  ASSERT_TRUE(sfs.export_tar("/", [&](std::string_view c) -> Result<void> {
    tar.append(c);
    return {};
  }));
  for (const auto& e : read_tar(tar))
    EXPECT_EQ(e.name.rfind("mnt", 0), std::string::npos) << e.name;
  EXPECT_EQ(get(root_ + "/mnt/file"), "on another mount");
}

TEST_F(SessionFsTest, SpecialFilesAreNeverOpened) {
  ASSERT_EQ(::mkfifo((root_ + "/home/user/fifo").c_str(), 0666), 0);
  ASSERT_EQ(::mknod((root_ + "/home/user/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
  symlink_at("fifo", root_ + "/home/user/fifolink");
  auto sfs = make_fs();
  // A blocking open of the fifo would hang here.
  EXPECT_CODE(sfs.read_file("/home/user/fifo"), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.read_file("/home/user/fifolink"), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.read_file("/home/user/null"), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.open_read("/home/user/null"), ErrorCode::invalid_argument);
  auto st = sfs.stat("/home/user/fifo");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->type, "other");
}

TEST_F(SessionFsTest, WritableRootsHoldAfterSymlinks) {
  symlink_at("/etc", root_ + "/home/user/etclink");
  symlink_at("/home/user/data", root_ + "/home/user/datalink");
  fs::create_directories(root_ + "/home/user/data");
  auto sfs = make_fs({}, {"/home/user", "/tmp", "/does/not/exist"});
  EXPECT_TRUE(sfs.write_file("/home/user/ok", "x"));
  EXPECT_TRUE(sfs.write_file("/tmp/ok", "x"));
  EXPECT_TRUE(sfs.write_file("/home/user/datalink/ok", "x"));  // a link that stays inside
  EXPECT_EQ(get(root_ + "/home/user/data/ok"), "x");
  EXPECT_CODE(sfs.write_file("/etc/passwd", "x"), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.write_file("/home/user/etclink/passwd", "x"), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.write_file("/home/user/../../etc/passwd", "x"), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.mkdir("/home/user/etclink/d"), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.mkdir("/etc/a/b", true), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.move("/home/user/ok", "/etc/ok"), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.remove("/home/user", true), ErrorCode::policy_denied);  // parent /home
  std::string tar = make_tar({file("x", "x")});
  EXPECT_CODE(sfs.import_tar("/home/user/etclink", chunks(tar)), ErrorCode::policy_denied);
  EXPECT_FALSE(lexists(root_ + "/etc/passwd"));
  EXPECT_FALSE(lexists(root_ + "/etc/x"));
  EXPECT_FALSE(lexists(root_ + "/etc/d"));
  EXPECT_TRUE(sfs.mkdir("/home/user/a/b", true));
  EXPECT_TRUE(sfs.remove("/home/user/a", true));
  // Reads are not restricted.
  put(root_ + "/etc/motd", "m");
  EXPECT_TRUE(sfs.read_file("/etc/motd"));
}

// ---- stat, list, mkdir, move, remove ----

TEST_F(SessionFsTest, StatAndList) {
  put(root_ + "/home/user/proj/a.txt", "aaa");
  put(root_ + "/home/user/proj/sub/b.txt", "b");
  put(root_ + "/home/user/proj/sub/deeper/c.txt", "c");
  symlink_at("sub", root_ + "/home/user/proj/link");
  symlink_at(outside_, root_ + "/home/user/proj/outlink");
  auto sfs = make_fs();

  auto st = sfs.stat("/home/user/proj/link");
  ASSERT_TRUE(st) << st.error().message();
  EXPECT_EQ(st->type, "symlink");
  EXPECT_EQ(st->symlink_target, "sub");
  EXPECT_EQ(st->name, "link");
  st = sfs.stat("/home/user/proj/a.txt");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->type, "file");
  EXPECT_EQ(st->size, 3u);
  EXPECT_GT(st->mtime_ms, 1600000000000);
  st = sfs.stat("/");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->type, "dir");
  EXPECT_EQ(st->name, "/");
  st = sfs.stat("/home/user/proj/sub/..");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->type, "dir");
  EXPECT_CODE(sfs.stat("/home/user/proj/nope"), ErrorCode::not_found);

  auto one = sfs.list("/home/user/proj");
  ASSERT_TRUE(one) << one.error().message();
  std::vector<std::string> paths;
  for (const auto& e : *one) paths.push_back(e.path + ":" + e.type);
  EXPECT_EQ(paths, (std::vector<std::string>{
                       "/home/user/proj/a.txt:file", "/home/user/proj/link:symlink",
                       "/home/user/proj/outlink:symlink", "/home/user/proj/sub:dir"}));
  EXPECT_EQ((*one)[2].symlink_target, outside_);

  auto two = sfs.list("/home/user/proj/", 2);
  ASSERT_TRUE(two);
  paths.clear();
  for (const auto& e : *two) paths.push_back(e.path);
  // Symlinked directories are not descended.
  EXPECT_EQ(paths,
            (std::vector<std::string>{"/home/user/proj/a.txt", "/home/user/proj/link",
                                      "/home/user/proj/outlink", "/home/user/proj/sub",
                                      "/home/user/proj/sub/b.txt", "/home/user/proj/sub/deeper"}));
  auto all = sfs.list("/home/user/proj", 100);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->size(), 7u);

  // Listing through a link lists its target, inside the root.
  auto via = sfs.list("/home/user/proj/link");
  ASSERT_TRUE(via);
  EXPECT_EQ(via->size(), 2u);
  EXPECT_CODE(sfs.list("/home/user/proj/outlink"), ErrorCode::not_found);
  EXPECT_CODE(sfs.list("/home/user/proj", 0), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.list("/home/user/proj/a.txt"), ErrorCode::invalid_argument);
}

TEST_F(SessionFsTest, MkdirMoveRemove) {
  auto sfs = make_fs();
  ASSERT_TRUE(sfs.mkdir("/home/user/d"));
  struct stat st = lstat_of(root_ + "/home/user/d");
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_uid, kUid);
  EXPECT_CODE(sfs.mkdir("/home/user/d"), ErrorCode::invalid_argument);
  EXPECT_TRUE(sfs.mkdir("/home/user/d", true));
  EXPECT_CODE(sfs.mkdir("/home/user/x/y"), ErrorCode::not_found);
  ASSERT_TRUE(sfs.mkdir("/home/user/x/y/z/", true));
  EXPECT_EQ(lstat_of(root_ + "/home/user/x/y").st_gid, kGid);

  ASSERT_TRUE(sfs.write_file("/home/user/d/f", "1"));
  ASSERT_TRUE(sfs.write_file("/home/user/g", "2"));
  ASSERT_TRUE(sfs.move("/home/user/d/f", "/home/user/x/f"));
  EXPECT_EQ(get(root_ + "/home/user/x/f"), "1");
  EXPECT_CODE(sfs.move("/home/user/g", "/home/user/x/f"), ErrorCode::invalid_argument);
  EXPECT_EQ(get(root_ + "/home/user/x/f"), "1");
  ASSERT_TRUE(sfs.move("/home/user/g", "/home/user/x/f", true));
  EXPECT_EQ(get(root_ + "/home/user/x/f"), "2");
  EXPECT_CODE(sfs.move("/home/user/nope", "/home/user/x/n"), ErrorCode::not_found);
  EXPECT_CODE(sfs.move("/home/user/x", "/home/user/x/y/inside"), ErrorCode::invalid_argument);

  EXPECT_CODE(sfs.remove("/home/user/x"), ErrorCode::invalid_argument);  // not empty
  ASSERT_TRUE(sfs.remove("/home/user/x/f"));
  EXPECT_FALSE(lexists(root_ + "/home/user/x/f"));
  ASSERT_TRUE(sfs.remove("/home/user/x", true));
  EXPECT_FALSE(lexists(root_ + "/home/user/x"));
  ASSERT_TRUE(sfs.remove("/home/user/d"));
  EXPECT_CODE(sfs.remove("/home/user/d"), ErrorCode::not_found);
}

TEST_F(SessionFsTest, MoveThroughLinksStaysInRoot) {
  symlink_at(outside_, root_ + "/home/user/dirlink");
  put(root_ + "/home/user/f", "f");
  auto sfs = make_fs();
  EXPECT_CODE(sfs.move("/home/user/dirlink/secret", "/home/user/stolen"), ErrorCode::not_found);
  EXPECT_CODE(sfs.move("/home/user/f", "/home/user/dirlink/f"), ErrorCode::not_found);
  // Moving the link moves the link.
  ASSERT_TRUE(sfs.move("/home/user/dirlink", "/home/user/moved"));
  EXPECT_EQ(fs::read_symlink(root_ + "/home/user/moved").string(), outside_);
  expect_outside_untouched();
}

TEST_F(SessionFsTest, RemoveNeverFollowsSymlinks) {
  put(root_ + "/home/user/keep/important", "keep");
  put(root_ + "/home/user/tree/a/file", "a");
  symlink_at(outside_, root_ + "/home/user/tree/abs");
  symlink_at(climb_to_outside(), root_ + "/home/user/tree/a/rel");
  symlink_at("../../keep", root_ + "/home/user/tree/a/keeplink");
  symlink_at("/home/user/keep", root_ + "/home/user/keeplink");
  auto sfs = make_fs();
  ASSERT_TRUE(sfs.remove("/home/user/tree", true));
  EXPECT_FALSE(lexists(root_ + "/home/user/tree"));
  // A symlink to a directory is removed as a link, also with a trailing slash.
  ASSERT_TRUE(sfs.remove("/home/user/keeplink/", true));
  EXPECT_FALSE(lexists(root_ + "/home/user/keeplink"));
  EXPECT_EQ(get(root_ + "/home/user/keep/important"), "keep");
  expect_outside_untouched();
}

// ---- limits ----

TEST_F(SessionFsTest, FileSizeLimits) {
  FsLimits limits;
  limits.max_file_bytes = 10;
  auto sfs = make_fs(limits);
  EXPECT_TRUE(sfs.write_file("/home/user/ten", std::string(10, 'x')));
  EXPECT_CODE(sfs.write_file("/home/user/eleven", std::string(11, 'x')), ErrorCode::limit);
  auto up = sfs.open_upload("/home/user/streamed");
  ASSERT_TRUE(up);
  ASSERT_TRUE(up->append(std::string(6, 'x')));
  EXPECT_CODE(up->append(std::string(6, 'x')), ErrorCode::limit);
  EXPECT_CODE(up->commit(), ErrorCode::internal);
  EXPECT_FALSE(lexists(root_ + "/home/user/streamed"));
  EXPECT_EQ(snapshot(root_ + "/home/user").size(), 1u);  // only "ten", no temp files

  put(root_ + "/home/user/big", std::string(11, 'x'));
  EXPECT_CODE(sfs.read_file("/home/user/big"), ErrorCode::limit);
  EXPECT_TRUE(sfs.open_read("/home/user/big"));  // streaming: the caller's business
}

TEST_F(SessionFsTest, ListEntryCap) {
  FsLimits limits;
  limits.max_list_entries = 5;
  auto sfs = make_fs(limits);
  for (int i = 0; i < 5; ++i) put(root_ + "/home/user/f" + std::to_string(i), "x");
  EXPECT_TRUE(sfs.list("/home/user"));
  put(root_ + "/home/user/f5", "x");
  EXPECT_CODE(sfs.list("/home/user"), ErrorCode::limit);
  EXPECT_CODE(sfs.list("/home", 2), ErrorCode::limit);
}

// ---- tar export ----

TEST_F(SessionFsTest, ExportStoresSymlinksNotTargets) {
  put(root_ + "/home/user/proj/a.txt", "aaa");
  put(root_ + "/home/user/proj/sub/b.txt", "bbb");
  symlink_at(outside_ + "/secret", root_ + "/home/user/proj/secretlink");
  symlink_at(outside_, root_ + "/home/user/proj/outdir");
  symlink_at(climb_to_outside(), root_ + "/home/user/proj/sub/reloutdir");
  ASSERT_EQ(::mkfifo((root_ + "/home/user/proj/fifo").c_str(), 0666), 0);
  auto sfs = make_fs();
  std::string tar;
  auto r = sfs.export_tar("/home/user/proj", [&](std::string_view c) -> Result<void> {
    tar.append(c);
    return {};
  });
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(tar.find(kSecret), std::string::npos);
  std::map<std::string, std::string> got;
  for (const auto& e : read_tar(tar)) {
    if (e.type == AE_IFLNK)
      got[e.name] = "link:" + e.link;
    else if (e.type == AE_IFDIR)
      got[e.name] = "dir";
    else
      got[e.name] = "file:" + e.data;
  }
  EXPECT_EQ(got, (std::map<std::string, std::string>{
                     {"a.txt", "file:aaa"},
                     {"outdir", "link:" + outside_},
                     {"secretlink", "link:" + outside_ + "/secret"},
                     {"sub", "dir"},
                     {"sub/b.txt", "file:bbb"},
                     {"sub/reloutdir", "link:" + climb_to_outside()},
                 }));
  // Exporting through a link to the outside resolves inside the root: nothing there.
  symlink_at(outside_, root_ + "/home/user/outlink");
  EXPECT_CODE(
      sfs.export_tar("/home/user/outlink", [](std::string_view) -> Result<void> { return {}; }),
      ErrorCode::not_found);
}

TEST_F(SessionFsTest, ExportLimitsAndSinkErrors) {
  put(root_ + "/home/user/proj/big", std::string(100000, 'x'));
  FsLimits limits;
  limits.max_archive_bytes = 30000;
  auto sfs = make_fs(limits);
  uint64_t sent = 0;
  auto r = sfs.export_tar("/home/user/proj", [&](std::string_view c) -> Result<void> {
    sent += c.size();
    return {};
  });
  EXPECT_CODE(r, ErrorCode::limit);
  EXPECT_LE(sent, 30000u);

  auto plain = make_fs();
  r = plain.export_tar("/home/user/proj", [](std::string_view) -> Result<void> {
    return fail(ErrorCode::system, "client went away", EPIPE);
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().context, "client went away");

  limits = {};
  limits.max_archive_entries = 2;
  put(root_ + "/home/user/proj/b", "b");
  put(root_ + "/home/user/proj/c", "c");
  auto few = make_fs(limits);
  EXPECT_CODE(
      few.export_tar("/home/user/proj", [](std::string_view) -> Result<void> { return {}; }),
      ErrorCode::limit);
}

// ---- tar import ----

struct BadTar {
  const char* what;
  std::vector<TarEntry> entries;
  const char* named;  // the entry the error must name
};

TEST_F(SessionFsTest, ImportRefusesBadEntries) {
  fs::create_directories(root_ + "/home/user/sub");
  const std::vector<BadTar> cases = {
      {"absolute path", {file("/etc/evil", "x")}, "/etc/evil"},
      {"dotdot", {file("../evil", "x")}, "../evil"},
      {"inner dotdot", {file("a/../../evil", "x")}, "a/../../evil"},
      {"dotdot to outside", {file("../../../../../../../.." + outside_ + "/evil", "x")}, "evil"},
      {"char device", {special("null", Kind::chardev)}, "null"},
      {"fifo", {special("pipe", Kind::fifo)}, "pipe"},
      {"hardlink to /etc/passwd", {hardlink("pw", "/etc/passwd")}, "pw"},
      {"hardlink up", {hardlink("pw", "../../../etc/passwd")}, "pw"},
      {"hardlink to missing", {hardlink("pw", "nothing")}, "pw"},
      {"hardlink in a new dir", {hardlink("newdir/pw", "/etc/passwd")}, "newdir/pw"},
      {"symlink in a new dir", {symlink("newdir/etc", "/etc")}, "newdir/etc"},
      {"symlink to /etc", {symlink("etc", "/etc")}, "etc"},
      {"symlink up", {symlink("up", "..")}, "up"},
      {"nested symlink up", {symlink("a/b/up", "../x/../../..")}, "a/b/up"},
      {"symlink then file through it", {symlink("l", "sub"), file("l/x", "x")}, "l/x"},
      {"self link walk", {symlink("d", "."), file("d/d/d/x", "x")}, "d/d/d/x"},
      {"file replaced by dir", {file("sub", "x")}, "sub"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    fs::create_directories(root_ + "/home/user/dest/sub");
    auto sfs = make_fs();
    std::string tar = make_tar(c.entries);
    auto r = sfs.import_tar("/home/user/dest", chunks(tar));
    ASSERT_FALSE(r) << "extracted " << *r;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << r.error().message();
    EXPECT_NE(r.error().context.find(c.named), std::string::npos) << r.error().message();
    // Nothing landed anywhere but dest (the first, allowed entry of a pair may have).
    EXPECT_FALSE(lexists(root_ + "/home/user/evil"));
    EXPECT_FALSE(lexists(root_ + "/home/evil"));
    EXPECT_FALSE(lexists(root_ + "/evil"));
    EXPECT_FALSE(lexists(root_ + "/etc/evil"));
    EXPECT_FALSE(lexists(root_ + "/home/user/dest/sub/x"));
    EXPECT_FALSE(lexists(root_ + "/home/user/dest/x"));
    EXPECT_FALSE(lexists(root_ + "/home/user/dest/pw"));
    EXPECT_FALSE(lexists(root_ + "/home/user/dest/newdir"));  // refused before creating parents
    expect_outside_untouched();
    fs::remove_all(root_ + "/home/user/dest");
  }
}

TEST_F(SessionFsTest, ImportDoesNotWalkPlantedSymlinks) {
  fs::create_directories(root_ + "/home/user/dest");
  symlink_at(outside_, root_ + "/home/user/dest/abs");
  symlink_at(climb_to_outside(), root_ + "/home/user/dest/rel");
  symlink_at("/home/user", root_ + "/home/user/dest/home");
  auto sfs = make_fs();
  for (const char* name : {"abs/evil", "rel/evil", "home/evil"}) {
    std::string tar = make_tar({file(name, "x")});
    auto r = sfs.import_tar("/home/user/dest", chunks(tar));
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << r.error().message();
    EXPECT_NE(r.error().context.find("symlink"), std::string::npos) << r.error().message();
  }
  EXPECT_FALSE(lexists(root_ + "/home/user/evil"));
  // A file entry named like a planted symlink replaces the link, not its target.
  std::string tar = make_tar({file("abs", "replaced")});
  auto r = sfs.import_tar("/home/user/dest", chunks(tar));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(get(root_ + "/home/user/dest/abs"), "replaced");
  expect_outside_untouched();
}

TEST_F(SessionFsTest, ImportAppliesOwnerAndDropsSetuid) {
  auto sfs = make_fs();
  std::string tar = make_tar({
      dir("./", 0700),
      file("bin/tool", "#!/bin/sh\n", 06755),
      dir("private", 0700),
      file("private/key", "k", 0600),
      symlink("link", "bin/tool"),
      hardlink("hard", "private/key"),
      dir("sticky", 01777),
  });
  auto r = sfs.import_tar("/home/user", chunks(tar));
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(*r, 6u);
  const std::string home = root_ + "/home/user";
  EXPECT_EQ(lstat_of(home + "/bin/tool").st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_of(home + "/bin").st_mode & 07777, 0755u);  // implicit parent
  EXPECT_EQ(lstat_of(home + "/private").st_mode & 07777, 0700u);
  EXPECT_EQ(lstat_of(home + "/sticky").st_mode & 07777, 0777u);
  EXPECT_EQ(lstat_of(home).st_mode & 07777, 0755u);  // "./" keeps the existing directory
  EXPECT_EQ(lstat_of(home + "/hard").st_ino, lstat_of(home + "/private/key").st_ino);
  EXPECT_EQ(lstat_of(home + "/bin/tool").st_mtime, 1700000000);
  for (const char* name : {"bin", "bin/tool", "private", "private/key", "link", "sticky"}) {
    struct stat st = lstat_of(home + "/" + name);
    EXPECT_EQ(st.st_uid, kUid) << name;
    EXPECT_EQ(st.st_gid, kGid) << name;
  }
  EXPECT_EQ(fs::read_symlink(home + "/link").string(), "bin/tool");
}

TEST_F(SessionFsTest, ImportLimits) {
  std::string tar = make_tar({file("a", "1"), file("b", "2"), file("c", "3")});
  FsLimits limits;
  limits.max_archive_entries = 2;
  fs::create_directories(root_ + "/home/user/one");
  EXPECT_CODE(make_fs(limits).import_tar("/home/user/one", chunks(tar)), ErrorCode::limit);

  std::string big = make_tar({file("big", std::string(5000, 'x'))});
  limits = {};
  limits.max_archive_bytes = 4000;
  EXPECT_CODE(make_fs(limits).import_tar("/home/user/one", chunks(big)), ErrorCode::limit);
  EXPECT_FALSE(lexists(root_ + "/home/user/one/big"));

  // Garbage and source errors.
  std::string garbage(4096, 'g');
  EXPECT_CODE(make_fs().import_tar("/home/user/one", chunks(garbage)), ErrorCode::invalid_argument);
  auto r = make_fs().import_tar("/home/user/one", []() -> Result<std::string_view> {
    return fail(ErrorCode::system, "client went away", EPIPE);
  });
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().context, "client went away");
  EXPECT_CODE(make_fs().import_tar("/home/user/missing", chunks(tar)), ErrorCode::not_found);
}

TEST_F(SessionFsTest, TarRoundTripAndGzip) {
  const std::string src = root_ + "/home/user/src";
  put(src + "/a.txt", "alpha");
  put(src + "/bin/run.sh", "#!/bin/sh\necho hi\n");
  fs::permissions(src + "/bin/run.sh", fs::perms(0755));
  put(src + "/secret/key", "k");
  fs::permissions(src + "/secret/key", fs::perms(0600));
  fs::permissions(src + "/secret", fs::perms(0700));
  fs::create_directories(src + "/empty/nested");
  std::string blob;
  for (uint32_t i = 0; i < 300000; ++i) blob += static_cast<char>((i * 7919u) % 251u);
  put(src + "/data/blob.bin", blob);
  put(src + "/" + std::string(150, 'n') + "/" + std::string(120, 'm'), "long names");
  symlink_at("../a.txt", src + "/bin/a-link");
  symlink_at("bin", src + "/binlink");
  put(src + "/caf\xe9-\xff", "not utf-8");  // names are bytes
  auto sfs = make_fs();

  std::string tar;
  auto e = sfs.export_tar("/home/user/src", [&](std::string_view c) -> Result<void> {
    tar.append(c);
    return {};
  });
  ASSERT_TRUE(e) << e.error().message();
  ASSERT_TRUE(sfs.mkdir("/home/user/copy"));
  auto n = sfs.import_tar("/home/user/copy", chunks(tar, 4096));
  ASSERT_TRUE(n) << n.error().message();
  EXPECT_EQ(*n, 14u);
  EXPECT_EQ(shape(root_ + "/home/user/copy"), shape(src));

  // The same tree gzip-compressed by the client.
  std::vector<TarEntry> entries = {file("z/one", blob), symlink("z/l", "one")};
  std::string tgz = make_tar(entries, /*gzip=*/true);
  ASSERT_EQ(tgz.substr(0, 2), "\x1f\x8b");
  ASSERT_TRUE(sfs.mkdir("/home/user/gz"));
  auto g = sfs.import_tar("/home/user/gz", chunks(tgz));
  ASSERT_TRUE(g) << g.error().message();
  EXPECT_EQ(get(root_ + "/home/user/gz/z/one"), blob);
}

}  // namespace

namespace cela::session {
namespace {

TEST_F(SessionFsTest, OwnerPermissionsAreRespected) {
  fs::create_directories(root_ + "/etc");
  fs::create_directories(root_ + "/home/user/mine");
  ASSERT_EQ(::chown((root_ + "/home/user/mine").c_str(), kUid, kGid), 0);
  fs::create_directories(root_ + "/sticky");
  ::chmod((root_ + "/sticky").c_str(), 01777);
  put(root_ + "/sticky/roots", "r");  // owned by root (the test)
  auto sfs = make_fs();
  sfs.respect_owner_permissions(true);
  EXPECT_CODE(sfs.write_file("/etc/evil", "x"), ErrorCode::permission_denied);
  EXPECT_FALSE(lexists(root_ + "/etc/evil"));
  EXPECT_CODE(sfs.mkdir("/etc/d"), ErrorCode::permission_denied);
  EXPECT_TRUE(sfs.write_file("/home/user/mine/ok", "x"));
  EXPECT_TRUE(sfs.write_file("/sticky/new", "x"));
  EXPECT_CODE(sfs.write_file("/sticky/roots", "x"), ErrorCode::permission_denied);
  EXPECT_CODE(sfs.remove("/sticky/roots"), ErrorCode::permission_denied);
  EXPECT_EQ(get(root_ + "/sticky/roots"), "r");
  // Without the flag (the daemon's own view): as before.
  auto plain = make_fs();
  EXPECT_TRUE(plain.write_file("/etc/evil", "x"));
}

TEST_F(SessionFsTest, ExportPolicy) {
  fs::create_directories(root_ + "/home/user/out");
  put(root_ + "/home/user/out/a", "hello SECRETVALUE");
  put(root_ + "/home/user/private", "p");
  symlink_at("/home/user/private", root_ + "/home/user/out/link");
  auto sfs = make_fs();
  sfs.set_export_policy({"/home/user/out"}, [](std::string_view, std::string data) -> Result<std::string> {
    if (data.find("SECRETVALUE") != std::string::npos) return fail(ErrorCode::policy_denied, "holds a secret");
    return data;
  });
  EXPECT_CODE(sfs.read_file("/home/user/private"), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.read_file("/home/user/out/link"), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.read_file("/home/user/out/a"), ErrorCode::policy_denied);
  EXPECT_CODE(sfs.export_tar("/home/user", [](std::string_view) -> Result<void> { return {}; }),
              ErrorCode::policy_denied);
  EXPECT_CODE(sfs.export_tar("/home/user/out", [](std::string_view) -> Result<void> { return {}; }),
              ErrorCode::policy_denied);
  put(root_ + "/home/user/out/a", "hello");
  auto ok = sfs.read_file("/home/user/out/a");
  ASSERT_TRUE(ok) << ok.error().message();
  EXPECT_EQ(*ok, "hello");
  EXPECT_TRUE(sfs.export_tar("/home/user/out", [](std::string_view) -> Result<void> { return {}; }));
}

}  // namespace
}  // namespace cela::session

// ---- the E2B facade's needs: reads as the owner, resolved paths, attributes, streaming

TEST_F(SessionFsTest, ReadsAsOwnerRespectModeBits) {
  fs::create_directories(root_ + "/root");
  ::chmod((root_ + "/root").c_str(), 0700);
  put(root_ + "/root/secret", "s");
  put(root_ + "/etc/shadowish", "s");
  ::chmod((root_ + "/etc/shadowish").c_str(), 0600);
  put(root_ + "/etc/open", "o");
  auto sfs = make_fs();
  sfs.respect_owner_permissions(true);
  EXPECT_CODE(sfs.read_file("/root/secret"), ErrorCode::permission_denied);
  EXPECT_CODE(sfs.list("/root"), ErrorCode::permission_denied);
  EXPECT_CODE(sfs.stat("/root/secret"), ErrorCode::permission_denied);
  EXPECT_CODE(sfs.read_file("/etc/shadowish"), ErrorCode::permission_denied);
  EXPECT_CODE(sfs.write_file("/root/new", "x"), ErrorCode::permission_denied);
  EXPECT_FALSE(lexists(root_ + "/root/new"));
  auto open = sfs.read_file("/etc/open");
  ASSERT_TRUE(open);
  EXPECT_EQ(*open, "o");
  // A symlink the sandbox planted does not turn the owner into root.
  symlink_at("/root/secret", root_ + "/tmp/l");
  EXPECT_CODE(sfs.read_file("/tmp/l"), ErrorCode::permission_denied);
  // The daemon's own view reads everything, as before.
  auto plain = make_fs();
  EXPECT_TRUE(plain.read_file("/root/secret"));
}

TEST_F(SessionFsTest, RealPathResolvesInsideTheRoot) {
  fs::create_directories(root_ + "/a/b");
  put(root_ + "/a/b/f", "x");
  symlink_at("b/f", root_ + "/a/rel");
  symlink_at("/a/b", root_ + "/abs");
  symlink_at(climb_to_outside(), root_ + "/escape");
  symlink_at("loop2", root_ + "/loop1");
  symlink_at("loop1", root_ + "/loop2");
  auto sfs = make_fs();
  EXPECT_EQ(sfs.real_path("/a/rel").value_or("?"), "/a/b/f");
  EXPECT_EQ(sfs.real_path("/abs/f").value_or("?"), "/a/b/f");
  EXPECT_EQ(sfs.real_path("/a/b/../../a/./b").value_or("?"), "/a/b");
  // ".." climbing past the root stops at it: the host's outside dir is not reached.
  auto esc = sfs.real_path("/escape");
  if (esc) {
    EXPECT_EQ(*esc, outside_);  // the sandbox path of that name, under the fake root
  } else {
    EXPECT_EQ(esc.error().code, ErrorCode::not_found);
  }
  EXPECT_CODE(sfs.real_path("/loop1"), ErrorCode::invalid_argument);
  EXPECT_CODE(sfs.real_path("/missing/x"), ErrorCode::not_found);
  expect_outside_untouched();
}

TEST_F(SessionFsTest, UploadAttributesAndInsideIds) {
  auto sfs = make_fs();
  WriteOptions o;
  o.xattrs = {{"user.e2b.team", "blue"}};
  ASSERT_TRUE(sfs.write_file("/meta", "m", o));
  auto attrs = sfs.xattrs("/meta", "user.e2b.");
  ASSERT_TRUE(attrs) << attrs.error().message();
  ASSERT_EQ(attrs->size(), 1u);
  EXPECT_EQ((*attrs)[0].first, "team");
  EXPECT_EQ((*attrs)[0].second, "blue");
  WriteOptions bad;
  bad.xattrs = {{"trusted.x", "1"}};
  EXPECT_CODE(sfs.write_file("/meta2", "m", bad), ErrorCode::invalid_argument);
  // Owner ids as the sandbox sees them once the id base is known.
  sfs.set_id_base(kUid - 1000);
  auto st = sfs.stat("/meta");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->uid, 1000u);
  EXPECT_EQ(st->format, static_cast<uint32_t>(S_IFREG));
  put(root_ + "/etc/passwd", "root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/bash\n");
  put(root_ + "/etc/group", "root:x:0:\nuser:x:1000:\n");
  EXPECT_EQ(sfs.user_name(1000), "user");
  EXPECT_EQ(sfs.group_name(1000), "user");
  EXPECT_EQ(sfs.user_name(0), "root");
  EXPECT_EQ(sfs.user_name(4242), "4242");
}

TEST_F(SessionFsTest, ExportFileStreamsWithTheReadChecks) {
  std::string big(200000, 'z');
  put(root_ + "/big", big);
  auto sfs = make_fs();
  std::string got;
  size_t chunks = 0;
  auto r = sfs.export_file("/big", [&](std::string_view c) -> Result<void> {
    got.append(c);
    ++chunks;
    return {};
  });
  ASSERT_TRUE(r) << r.error().message();
  EXPECT_EQ(got, big);
  EXPECT_GT(chunks, 1u);
  EXPECT_EQ(r->size, big.size());
  EXPECT_EQ(r->sha256, sha256_hex(big));
  FsLimits small;
  small.max_file_bytes = 1000;
  auto capped = make_fs(small);
  EXPECT_CODE(capped.export_file("/big", [](std::string_view) -> Result<void> { return {}; }), ErrorCode::limit);
  symlink_at(climb_to_outside() + "/secret", root_ + "/leak");
  auto leak = sfs.export_file("/leak", [&](std::string_view c) -> Result<void> {
    EXPECT_EQ(std::string(c).find(kSecret), std::string::npos);
    return {};
  });
  EXPECT_FALSE(leak);
}
