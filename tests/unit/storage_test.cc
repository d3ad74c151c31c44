// Storage pieces that need no sandbox: the volume store's layout and names, the loop
// ledger's recovery (it never touches a device not bound to the recorded inode), the
// create body's volumes and disk kind, and the config sections.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>

#include "api/session_specs.h"
#include "common/json_fields.h"
#include "jail/disk.h"
#include "rootfs/volumes.h"
#include "session/config.h"

namespace cela {
namespace fs = std::filesystem;
namespace {

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/cela-storage-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(VolumeNames, OnlySafeNames) {
  EXPECT_TRUE(rootfs::valid_volume_name(std::string(63, 'x')));
  for (const char* ok : {"a", "work", "my-vol_1.2", "0abc"})
    EXPECT_TRUE(rootfs::valid_volume_name(ok)) << ok;
  for (const char* bad : {"", ".", "..", "-a", "_a", ".a", "A", "a/b", "a b", "a\n", "../x"})
    EXPECT_FALSE(rootfs::valid_volume_name(bad)) << bad;
  EXPECT_FALSE(rootfs::valid_volume_name(std::string(64, 'x')));
}

TEST(VolumeStore, CreateListRemoveAndUnfinishedCreatesGo) {
  TempDir dir;
  rootfs::VolumeStore store(dir.path() + "/volumes");
  ASSERT_TRUE(store.open());
  auto image = store.begin_create("t-1", "work");
  ASSERT_TRUE(image) << image.error().message();
  EXPECT_EQ(*image, dir.path() + "/volumes/t-1/work/image.ext4");
  // Reserved but not committed: not a volume yet, and the name is taken.
  EXPECT_EQ(store.get("t-1", "work").error().code, ErrorCode::not_found);
  EXPECT_EQ(store.begin_create("t-1", "work").error().code, ErrorCode::conflict);
  std::ofstream(*image) << "img";
  ASSERT_TRUE(store.commit("t-1", "work", 64));
  auto got = store.get("t-1", "work");
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got->size_mb, 64u);
  EXPECT_GT(got->allocated_bytes, 0u);
  // Tenant-scoped.
  EXPECT_EQ(store.get("t-2", "work").error().code, ErrorCode::not_found);
  EXPECT_TRUE(store.list("t-2")->empty());
  ASSERT_TRUE(store.begin_create("t-1", "half"));
  auto list = store.list("t-1");
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "work");
  // A restart removes the unfinished one, keeps the volume.
  rootfs::VolumeStore again(dir.path() + "/volumes");
  EXPECT_EQ(*again.open(), 1);
  EXPECT_FALSE(fs::exists(dir.path() + "/volumes/t-1/half"));
  EXPECT_TRUE(again.get("t-1", "work"));
  ASSERT_TRUE(again.remove("t-1", "work"));
  EXPECT_FALSE(fs::exists(dir.path() + "/volumes/t-1/work"));
  // Names that are not volume names never reach the file system.
  EXPECT_EQ(again.remove("t-1", "../t-1").error().code, ErrorCode::not_found);
  EXPECT_EQ(again.get("t-1", "..").error().code, ErrorCode::not_found);
}

TEST(LoopLedger, RecoveryDropsEntriesOfDevicesNotBoundToTheirInode) {
  TempDir dir;
  jail::LoopLedger ledger(dir.path() + "/loops");
  ASSERT_TRUE(ledger.open());
  // Whatever loop0 is bound to (possibly someone else's image), it is not this inode:
  // the entry goes and the device is left alone.
  struct stat st {};
  ASSERT_EQ(::stat(dir.path().c_str(), &st), 0);
  jail::LoopDevice fake;
  fake.number = 0;
  fake.backing_dev = st.st_dev;
  fake.backing_ino = st.st_ino;
  ASSERT_TRUE(ledger.record(fake));
  std::ofstream(dir.path() + "/loops/loop999999-1-1");
  EXPECT_TRUE(jail::loop_released(0, st.st_dev, st.st_ino));
  EXPECT_TRUE(jail::loop_released(999999, 1, 1));
  auto detached = ledger.recover();
  ASSERT_TRUE(detached) << detached.error().message();
  EXPECT_EQ(*detached, 0);
  EXPECT_TRUE(fs::is_empty(dir.path() + "/loops"));
}

Result<session::CreateSessionSpec> create(std::string_view body) {
  auto o = parse_json_object(body);
  if (!o) return std::unexpected(o.error());
  return api::parse_create_session(*o, session::DaemonConfig{});
}

TEST(CreateBody, VolumesAndDiskKind) {
  auto s = create(R"({"disk": {"kind": "memory"},
                      "volumes": [{"name": "w", "path": "/work"}, {"name": "r", "path": "/data/r", "read_only": true}]})");
  ASSERT_TRUE(s) << s.error().message();
  EXPECT_EQ(s->disk_kind, "memory");
  ASSERT_EQ(s->volumes.size(), 2u);
  EXPECT_EQ(s->volumes[0], (store::VolumeMountSpec{"w", "/work", false}));
  EXPECT_EQ(s->volumes[1], (store::VolumeMountSpec{"r", "/data/r", true}));
  EXPECT_FALSE(create("{}")->disk_kind.has_value());
  for (const char* bad :
       {R"({"disk": {"kind": "ssd"}})", R"({"disk": {"size": 1}})", R"({"volumes": [{"name": "w", "path": "/"}]})",
        R"({"volumes": [{"name": "w", "path": "work"}]})", R"({"volumes": [{"name": "w", "path": "/a/../b"}]})",
        R"({"volumes": [{"name": "w", "path": "/a/./b"}]})", R"({"volumes": [{"name": "w", "path": "/proc/x"}]})",
        R"({"volumes": [{"name": "w", "path": "/sys"}]})", R"({"volumes": [{"name": "w", "path": "/dev/shm"}]})",
        R"({"volumes": [{"name": "w", "path": "/a//b"}]})", R"({"volumes": [{"name": "w", "path": "/a/"}]})",
        R"({"volumes": [{"name": "w", "path": "/a"}, {"name": "v", "path": "/a"}]})",
        R"({"volumes": [{"name": "w", "path": "/a"}, {"name": "w", "path": "/b"}]})",
        R"({"volumes": [{"path": "/a"}]})", R"({"volumes": [{"name": "w", "path": "/a", "rw": true}]})",
        R"({"volumes": ["w"]})"}) {
    auto r = create(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << bad;
    }
  }
}

TEST(StorageConfig, Sections) {
  auto parse = [](std::string_view text) {
    auto o = parse_json_object(text);
    return session::DaemonConfig::from_json(*o);
  };
  auto d = parse("{}");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->disk.kind, "disk");  // the default: disk-backed layers
  EXPECT_EQ(d->disks_dir(), d->state_dir + "/disks");
  EXPECT_EQ(d->volumes_dir(), d->state_dir + "/volumes");
  auto c = parse(R"({"disk": {"kind": "memory", "pool": 0, "dir": "/x"}, "volumes": {"max_size_mb": 64}})");
  ASSERT_TRUE(c) << c.error().message();
  EXPECT_EQ(c->disk.kind, "memory");
  EXPECT_EQ(c->disk.pool, 0u);
  EXPECT_EQ(c->disks_dir(), "/x");
  EXPECT_EQ(c->volumes.max_size_mb, 64u);
  EXPECT_FALSE(parse(R"({"disk": {"kind": "tape"}})"));
  EXPECT_FALSE(parse(R"({"disk": {"pool": 100000}})"));
  EXPECT_FALSE(parse(R"({"disk": {"quota": 1}})"));
  EXPECT_FALSE(parse(R"({"volumes": {"max_size_mb": 1}})"));
}

}  // namespace
}  // namespace cela
