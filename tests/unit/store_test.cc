// The SQLite store: schema and migrations, keys (hash-only storage), tenant scoping,
// listing with filters and cursors, recovery queries, API JSON shapes, concurrency.
// Each test gets a fresh temporary state dir.
#include "store/store.h"

#include "api/render.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace cela;
using namespace cela::store;
namespace json = boost::json;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/cela-store-test-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_path_ = dir_.path() + "/state.db";
    auto opened = Store::open(db_path_);
    ASSERT_TRUE(opened) << opened.error().message();
    store_ = std::move(*opened);
    auto a = store_->create_tenant("alpha", Quotas{});
    auto b = store_->create_tenant("beta", Quotas{});
    ASSERT_TRUE(a && b);
    alpha_ = a->id;
    beta_ = b->id;
  }

  SessionRecord session(const std::string& tenant, std::string state = "ready",
                        int64_t created_ms = 1'780'000'000'000) {
    SessionRecord s;
    s.id = new_id("s");
    s.tenant_id = tenant;
    s.state = std::move(state);
    s.template_ref = "base@2026.11.29-2";
    s.limits = SessionLimits{.cpus = 1.0, .memory_mb = 512, .ttl_s = 3600};
    s.network = NetworkPolicy{};
    s.created_at = format_rfc3339(created_ms);
    return s;
  }

  SessionRecord insert(const std::string& tenant, std::string state = "ready",
                       int64_t created_ms = 1'780'000'000'000) {
    SessionRecord s = session(tenant, std::move(state), created_ms);
    auto r = store_->insert_session(s);
    EXPECT_TRUE(r) << r.error().message();
    return s;
  }

  ExecRecord exec(const SessionRecord& s) {
    ExecRecord e;
    e.id = new_id("e");
    e.session_id = s.id;
    e.tenant_id = s.tenant_id;
    e.argv = {"python3", "-c", "print(1)"};
    e.cwd = "/home/user";
    e.user = "user";
    e.started_at = now_rfc3339();
    return e;
  }

  TempDir dir_;
  std::string db_path_;
  std::unique_ptr<Store> store_;
  std::string alpha_, beta_;
};

// ---- Schema, files ----

TEST_F(StoreTest, OpenCreatesSchemaWithMode0600) {
  auto version = store_->schema_version();
  ASSERT_TRUE(version);
  EXPECT_EQ(*version, 9);
  EXPECT_EQ(mode_of(db_path_), 0600u);
  ASSERT_TRUE(std::filesystem::exists(db_path_ + "-wal"));  // WAL is on
  EXPECT_EQ(mode_of(db_path_ + "-wal"), 0600u);
  EXPECT_EQ(mode_of(db_path_ + "-shm"), 0600u);
}

TEST_F(StoreTest, OpenTightensAnExistingLooseFile) {
  const std::string path = dir_.path() + "/loose.db";
  ASSERT_EQ(::close(::open(path.c_str(), O_CREAT | O_WRONLY, 0644)), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  ASSERT_TRUE(Store::open(path));
  EXPECT_EQ(mode_of(path), 0600u);
}

TEST_F(StoreTest, OpenRefusesASymlink) {
  const std::string link = dir_.path() + "/link.db";
  ASSERT_EQ(::symlink(db_path_.c_str(), link.c_str()), 0);
  auto opened = Store::open(link);
  ASSERT_FALSE(opened);
  EXPECT_EQ(opened.error().err, ELOOP) << opened.error().message();
}

TEST_F(StoreTest, DatabaseDescriptorsAreCloseOnExec) {
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto target = std::filesystem::read_symlink(entry.path(), ec);
    if (ec || target.string().rfind(db_path_, 0) != 0) continue;
    const int fd = std::stoi(entry.path().filename().string());
    ++seen;
    EXPECT_TRUE(::fcntl(fd, F_GETFD) & FD_CLOEXEC) << target;
  }
  EXPECT_GE(seen, 2);  // the database and its WAL at least
}

TEST_F(StoreTest, ReopenKeepsDataAndMigrationIsIdempotent) {
  SessionRecord s = insert(alpha_);
  store_.reset();
  for (int round = 0; round < 2; ++round) {
    auto reopened = Store::open(db_path_);
    ASSERT_TRUE(reopened) << reopened.error().message();
    EXPECT_EQ(*(*reopened)->schema_version(), 9);
    auto tenants = (*reopened)->list_tenants();
    ASSERT_TRUE(tenants);
    ASSERT_EQ(tenants->size(), 2u);
    EXPECT_EQ((*tenants)[0].name, "alpha");
    auto got = (*reopened)->get_session(alpha_, s.id);
    ASSERT_TRUE(got) << got.error().message();
    EXPECT_EQ(got->template_ref, s.template_ref);
  }
}

TEST_F(StoreTest, RefusesASchemaFromANewerCela) {
  store_.reset();
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(raw);
  auto opened = Store::open(db_path_);
  ASSERT_FALSE(opened);
  EXPECT_NE(opened.error().context.find("newer"), std::string::npos) << opened.error().message();
}

TEST_F(StoreTest, ErrorsNameTheStep) {
  SessionRecord s = insert(alpha_);
  auto again = store_->insert_session(s);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::conflict);
  EXPECT_NE(again.error().context.find("insert session " + s.id), std::string::npos);
  EXPECT_NE(again.error().context.find("UNIQUE constraint failed"), std::string::npos)
      << again.error().message();

  SessionRecord orphan = session("t-nosuchtenant00");
  auto fk = store_->insert_session(orphan);
  ASSERT_FALSE(fk);
  EXPECT_EQ(fk.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(fk.error().context.find("FOREIGN KEY"), std::string::npos) << fk.error().message();

  SessionRecord bad = session(alpha_);
  bad.created_at = "yesterday";
  EXPECT_EQ(store_->insert_session(bad).error().code, ErrorCode::invalid_argument);
}

// ---- Tenants and keys ----

TEST_F(StoreTest, TenantsRoundTrip) {
  auto t = store_->create_tenant("gamma", Quotas{5, 4096, 2.5});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->id.rfind("t-", 0), 0u);
  auto got = store_->get_tenant(t->id);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->name, "gamma");
  EXPECT_EQ(got->quotas.max_sessions, 5);
  EXPECT_EQ(got->quotas.max_memory_mb, 4096);
  EXPECT_DOUBLE_EQ(got->quotas.max_cpus, 2.5);
  EXPECT_EQ(store_->get_tenant("t-0000000000000000").error().code, ErrorCode::not_found);
  EXPECT_EQ(store_->create_tenant("gamma", Quotas{}).error().code, ErrorCode::conflict);
  EXPECT_EQ(api::render(*got).at("quotas").at("max_sessions").as_int64(), 5);
}

class StoreBootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    db_path_ = dir_.path() + "/state.db";
    auto opened = Store::open(db_path_);
    ASSERT_TRUE(opened) << opened.error().message();
    store_ = std::move(*opened);
  }
  TempDir dir_;
  std::string db_path_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreBootstrapTest, CreatesOneDefaultTenantAndAdminKeyOnce) {
  auto first = store_->bootstrap(Quotas{10, 8192, 4});
  ASSERT_TRUE(first) << first.error().message();
  ASSERT_TRUE(first->has_value());
  const std::string key = **first;
  EXPECT_EQ(key.rfind("cela_", 0), 0u);
  EXPECT_EQ(key.size(), 5u + 64u);

  auto second = store_->bootstrap(Quotas{});
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->has_value());

  auto tenants = store_->list_tenants();
  ASSERT_TRUE(tenants);
  ASSERT_EQ(tenants->size(), 1u);
  EXPECT_EQ((*tenants)[0].name, "default");
  EXPECT_EQ((*tenants)[0].quotas.max_sessions, 10);

  auto record = store_->authenticate(key);
  ASSERT_TRUE(record);
  ASSERT_TRUE(record->has_value());
  EXPECT_TRUE((*record)->admin);
  EXPECT_EQ((*record)->tenant_id, (*tenants)[0].id);

  // Survives a reopen, still without a second tenant.
  store_.reset();
  auto reopened = Store::open(db_path_);
  ASSERT_TRUE(reopened);
  EXPECT_FALSE((*(*reopened)->bootstrap(Quotas{})).has_value());
  EXPECT_TRUE((*(*reopened)->authenticate(key)).has_value());
}

// Only host admin keys act across tenants: the bootstrap key is one, other admin keys
// are not unless asked for, and a host admin key is an admin key.
TEST_F(StoreBootstrapTest, HostAdminKeysAreMarkedAndOnlyWhenAsked) {
  const std::string boot = **store_->bootstrap(Quotas{});
  auto other = store_->create_tenant("other", Quotas{});
  ASSERT_TRUE(other);
  auto tenant_admin = store_->create_key(other->id, true);
  auto host_admin = store_->create_key(other->id, false, true);
  ASSERT_TRUE(tenant_admin && host_admin);
  auto role = [&](const std::string& key) {
    auto r = **store_->authenticate(key);
    return std::pair{r.admin, r.host_admin};
  };
  EXPECT_EQ(role(boot), std::pair(true, true));
  EXPECT_EQ(role(tenant_admin->key), std::pair(true, false));
  EXPECT_EQ(role(host_admin->key), std::pair(true, true));
}

// KeyForm::e2b: E2B's spelling (the Python SDK checks ^e2b_[0-9a-f]+$), and otherwise
// an ordinary key of its tenant; the default form is unchanged.
TEST_F(StoreBootstrapTest, E2bFormKeysAreSpeltForE2bAndAuthenticate) {
  (void)store_->bootstrap(Quotas{});
  auto other = store_->create_tenant("other", Quotas{});
  ASSERT_TRUE(other);
  auto e2b = store_->create_key(other->id, false, false, KeyForm::e2b);
  auto plain = store_->create_key(other->id, false);
  ASSERT_TRUE(e2b && plain);
  auto hex_after = [](const std::string& key, std::string_view prefix) {
    if (!key.starts_with(prefix) || key.size() != prefix.size() + 64) return false;
    return key.find_first_not_of("0123456789abcdef", prefix.size()) == std::string::npos;
  };
  EXPECT_TRUE(hex_after(e2b->key, "e2b_")) << e2b->key;
  EXPECT_TRUE(hex_after(plain->key, "cela_")) << plain->key;
  auto found = store_->authenticate(e2b->key);
  ASSERT_TRUE(found && *found);
  EXPECT_EQ((*found)->tenant_id, other->id);
  EXPECT_EQ((*found)->id, e2b->id);
  EXPECT_FALSE((*found)->admin);
  // The same hex under the other prefix is not the key.
  EXPECT_FALSE(*store_->authenticate("cela_" + e2b->key.substr(4)));
}

// Migration 4: before it every admin key acted across tenants; after it only the
// default tenant's (the operator's) do.
TEST_F(StoreBootstrapTest, MigrationKeepsOnlyTheDefaultTenantsAdminKeysHostWide) {
  const std::string boot = **store_->bootstrap(Quotas{});
  auto other = store_->create_tenant("other", Quotas{});
  ASSERT_TRUE(other);
  const std::string other_admin = store_->create_key(other->id, true, true)->key;
  const std::string default_user = store_->create_key((*store_->list_tenants())[0].id, false)->key;
  store_.reset();
  // Back to schema 3: the column (and what later migrations made) did not exist.
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db_path_.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw,
                         "DROP TABLE package_installs; DROP TABLE egress_connections; DROP TABLE egress_limit_events; "
                         "ALTER TABLE tenants DROP COLUMN network_ceiling; DROP TABLE audit; DROP TABLE audit_anchor; "
                         "DROP TABLE pooled_sessions; DROP TABLE secrets; "
                         "ALTER TABLE api_keys DROP COLUMN host_admin; PRAGMA user_version = 3",
                         nullptr, nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(raw);
  sqlite3_close(raw);
  auto reopened = Store::open(db_path_);
  ASSERT_TRUE(reopened) << reopened.error().message();
  EXPECT_EQ(*(*reopened)->schema_version(), 9);
  auto host = [&](const std::string& key) { return (**(*reopened)->authenticate(key)).host_admin; };
  EXPECT_TRUE(host(boot));
  EXPECT_FALSE(host(other_admin));
  EXPECT_FALSE(host(default_user));
  EXPECT_TRUE((**(*reopened)->authenticate(other_admin)).admin);
}

TEST_F(StoreBootstrapTest, WrongKeysDoNotAuthenticate) {
  const std::string key = **store_->bootstrap(Quotas{});
  std::vector<std::string> wrong = {"",
                                    "cela_",
                                    key.substr(0, key.size() - 1),
                                    key + "0",
                                    "cela_" + std::string(64, '0'),
                                    "Bearer " + key};
  for (size_t pos : {size_t{0}, size_t{5}, size_t{6}, key.size() / 2, key.size() - 1}) {
    std::string changed = key;
    changed[pos] = changed[pos] == 'a' ? 'b' : 'a';
    wrong.push_back(changed);
  }
  for (const auto& candidate : wrong) {
    auto r = store_->authenticate(candidate);
    ASSERT_TRUE(r);
    EXPECT_FALSE(r->has_value()) << "authenticated: " << candidate;
  }
  EXPECT_TRUE((*store_->authenticate(key)).has_value());
}

TEST_F(StoreBootstrapTest, PlaintextKeyIsNeverOnDisk) {
  std::vector<std::string> keys = {**store_->bootstrap(Quotas{})};
  const std::string tenant = (*store_->list_tenants())[0].id;
  for (int i = 0; i < 3; ++i) keys.push_back(store_->create_key(tenant, i % 2 == 0)->key);

  auto search_files = [&](const char* when) {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      const std::string bytes = slurp(db_path_ + suffix);
      for (const auto& key : keys) {
        const std::string secret = key.substr(5);  // without the "cela_" prefix
        EXPECT_EQ(bytes.find(secret), std::string::npos) << when << ": key in " << suffix;
        EXPECT_EQ(bytes.find(secret.substr(0, 16)), std::string::npos) << when << suffix;
      }
    }
  };
  search_files("open");
  ASSERT_FALSE(slurp(db_path_ + "-wal").empty());  // the search above saw real WAL bytes
  store_.reset();                                  // checkpoints the WAL into the main file
  search_files("closed");
}

TEST_F(StoreBootstrapTest, RevokedKeyFailsOthersStillWork) {
  (void)store_->bootstrap(Quotas{});
  const std::string tenant = (*store_->list_tenants())[0].id;
  auto a = store_->create_key(tenant, false);
  auto b = store_->create_key(tenant, false);
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->key, b->key);
  EXPECT_FALSE((**store_->authenticate(a->key)).admin);
  ASSERT_TRUE(store_->revoke_key(a->id));
  EXPECT_FALSE((*store_->authenticate(a->key)).has_value());
  EXPECT_TRUE((*store_->authenticate(b->key)).has_value());
  EXPECT_EQ(store_->revoke_key("k-0000000000000000").error().code, ErrorCode::not_found);
  EXPECT_EQ(store_->create_key("t-0000000000000000", false).error().code, ErrorCode::not_found);
}

TEST_F(StoreBootstrapTest, WriteSecretFile) {
  const std::string path = dir_.path() + "/dev.key";
  ASSERT_TRUE(write_secret_file(path, "cela_first"));
  EXPECT_EQ(mode_of(path), 0600u);
  EXPECT_EQ(slurp(path), "cela_first");
  ASSERT_TRUE(write_secret_file(path, "cela_second"));
  EXPECT_EQ(slurp(path), "cela_second");

  // A symlink planted at the path is replaced, its target left alone.
  const std::string target = dir_.path() + "/target";
  std::ofstream(target) << "untouched";
  std::filesystem::remove(path);
  ASSERT_EQ(::symlink(target.c_str(), path.c_str()), 0);
  ASSERT_TRUE(write_secret_file(path, "cela_third"));
  EXPECT_EQ(slurp(target), "untouched");
  EXPECT_FALSE(std::filesystem::is_symlink(path));
  EXPECT_EQ(slurp(path), "cela_third");
  // No temporary files left behind.
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos);
  }
}

// ---- Sessions ----

TEST_F(StoreTest, SessionRoundTripsEveryField) {
  SessionRecord s = session(alpha_);
  s.metadata = {{"user", "u-17"}, {"odd key.\"x\"", "v"}};
  s.spec = KeptSpec{.template_name = "base",
                    .allow_sudo = true,
                    .disk_kind = "disk",
                    .volumes = {{"work", "/work", false}, {"ref", "/data/ref", true}}};
  s.limits.exec_timeout_s = 77;
  s.expires_at = "2026-05-28T21:46:40.000Z";
  s.idle_timeout_s = 600;
  s.slot = 3;
  s.cgroup = "/sys/fs/cgroup/cela/" + s.id;
  s.init_pid = 4242;
  ASSERT_TRUE(store_->insert_session(s));
  auto got = store_->get_session(alpha_, s.id);
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got->metadata, s.metadata);
  EXPECT_EQ(got->limits, s.limits);
  EXPECT_EQ(got->network, s.network);
  EXPECT_EQ(got->spec, s.spec);
  EXPECT_EQ(got->created_at, s.created_at);
  EXPECT_EQ(got->expires_at, s.expires_at);
  EXPECT_EQ(got->ready_at, "");
  EXPECT_EQ(got->idle_timeout_s, 600);
  EXPECT_EQ(got->slot, 3);
  EXPECT_EQ(got->cgroup, s.cgroup);
  EXPECT_EQ(got->init_pid, 4242);
  EXPECT_FALSE(got->startup_ms.has_value());
  EXPECT_FALSE(got->cleanup.has_value());

  got->network = NetworkPolicy{.mode = "allowlist", .allow = {"a.example"}, .deny = {"b.example"}};
  got->expires_at = "2026-05-28T22:46:40.000Z";
  ASSERT_TRUE(store_->update_session(*got));
  auto updated = store_->get_session_any(s.id);
  ASSERT_TRUE(updated);
  EXPECT_EQ(updated->network, got->network);
  EXPECT_EQ(updated->expires_at, got->expires_at);
}

TEST_F(StoreTest, TenantIsolation) {
  SessionRecord mine = insert(alpha_);
  insert(beta_);
  auto foreign = store_->get_session(beta_, mine.id);
  ASSERT_FALSE(foreign);
  EXPECT_EQ(foreign.error().code, ErrorCode::not_found);
  EXPECT_TRUE(store_->get_session(alpha_, mine.id));
  EXPECT_TRUE(store_->get_session_any(mine.id));

  auto page = store_->list_sessions(beta_, {}, {});
  ASSERT_TRUE(page);
  ASSERT_EQ(page->records.size(), 1u);
  EXPECT_NE(page->records[0].id, mine.id);

  ExecRecord e = exec(mine);
  ASSERT_TRUE(store_->insert_exec(e));
  EXPECT_TRUE(store_->get_exec(alpha_, mine.id, e.id));
  EXPECT_EQ(store_->get_exec(beta_, mine.id, e.id).error().code, ErrorCode::not_found);
  EXPECT_EQ(store_->get_exec(alpha_, page->records[0].id, e.id).error().code, ErrorCode::not_found);
}

TEST_F(StoreTest, ListPagesWithStableCursors) {
  std::vector<std::string> ids;
  for (int i = 0; i < 25; ++i) {
    // Pairs share a millisecond: the id breaks the tie.
    ids.push_back(insert(alpha_, "ready", 1'780'000'000'000 + i / 2).id);
  }
  auto all = store_->list_sessions(alpha_, {}, PageRequest{1000, ""});
  ASSERT_TRUE(all);
  ASSERT_EQ(all->records.size(), 25u);
  EXPECT_TRUE(all->next_cursor.empty());
  for (size_t i = 1; i < all->records.size(); ++i) {
    EXPECT_GE(all->records[i - 1].created_at, all->records[i].created_at);  // newest first
  }

  std::vector<size_t> sizes;
  std::vector<std::string> paged;
  PageRequest request{10, ""};
  for (;;) {
    auto page = store_->list_sessions(alpha_, {}, request);
    ASSERT_TRUE(page) << page.error().message();
    sizes.push_back(page->records.size());
    for (const auto& s : page->records) paged.push_back(s.id);
    if (page->next_cursor.empty()) break;
    request.cursor = page->next_cursor;
    // A session created between pages (newer than everything) does not shift them.
    if (sizes.size() == 1) insert(alpha_, "ready", 1'790'000'000'000);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{10, 10, 5}));
  EXPECT_EQ(std::set<std::string>(paged.begin(), paged.end()).size(), 25u);
  for (size_t i = 0; i < paged.size(); ++i) EXPECT_EQ(paged[i], all->records[i].id);

  EXPECT_EQ(store_->list_sessions(alpha_, {}, PageRequest{0, ""}).error().code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(store_->list_sessions(alpha_, {}, PageRequest{1001, ""}).error().code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(store_->list_sessions(alpha_, {}, PageRequest{10, "zz"}).error().code,
            ErrorCode::invalid_argument);
  EXPECT_EQ(store_->list_sessions(alpha_, {}, PageRequest{10, "abcd"}).error().code,
            ErrorCode::invalid_argument);
}

// any_state: one of several states (E2B's "running" is starting, ready or running).
TEST_F(StoreTest, ListFiltersByAnyOfSeveralStates) {
  const std::string ready = insert(alpha_, "ready").id;
  const std::string paused = insert(alpha_, "paused").id;
  insert(alpha_, "terminated");
  SessionFilter live;
  live.any_state = {"ready", "running", "paused"};
  auto page = store_->list_sessions(alpha_, live, {});
  ASSERT_TRUE(page) << page.error().message();
  std::set<std::string> ids;
  for (const auto& r : page->records) ids.insert(r.id);
  EXPECT_EQ(ids, (std::set<std::string>{ready, paused}));
  SessionFilter only_paused;
  only_paused.any_state = {"paused"};
  auto p = store_->list_sessions(alpha_, only_paused, {});
  ASSERT_TRUE(p);
  ASSERT_EQ(p->records.size(), 1u);
  EXPECT_EQ(p->records[0].id, paused);
  SessionFilter bad;
  bad.any_state = {"ready", "sleeping"};
  EXPECT_EQ(store_->list_sessions(alpha_, bad, {}).error().code, ErrorCode::invalid_argument);
}

TEST_F(StoreTest, ListFiltersByStateAndMetadata) {
  auto with = [&](std::string state, std::map<std::string, std::string> metadata) {
    SessionRecord s = session(alpha_, std::move(state));
    s.metadata = std::move(metadata);
    EXPECT_TRUE(store_->insert_session(s));
    return s.id;
  };
  const std::string a = with("ready", {{"user", "u-17"}, {"team", "x"}});
  const std::string b = with("paused", {{"user", "u-17"}});
  with("ready", {{"user", "u-18"}, {"team", "x"}});
  with("terminated", {});

  auto ids = [&](SessionFilter filter) {
    std::set<std::string> out;
    auto page = store_->list_sessions(alpha_, filter, {});
    EXPECT_TRUE(page) << page.error().message();
    if (page) {
      for (const auto& s : page->records) out.insert(s.id);
    }
    return out;
  };
  EXPECT_EQ(ids({"paused", {}}), (std::set<std::string>{b}));
  EXPECT_EQ(ids({std::nullopt, {{"user", "u-17"}}}), (std::set<std::string>{a, b}));
  EXPECT_EQ(ids({std::nullopt, {{"user", "u-17"}, {"team", "x"}}}), (std::set<std::string>{a}));
  EXPECT_EQ(ids({"ready", {{"user", "u-17"}}}), (std::set<std::string>{a}));
  EXPECT_EQ(ids({std::nullopt, {{"user", "nobody"}}}).size(), 0u);
  EXPECT_EQ(ids({"terminated", {}}).size(), 1u);
  EXPECT_EQ(store_->list_sessions(alpha_, {"sleeping", {}}, {}).error().code,
            ErrorCode::invalid_argument);
}

TEST_F(StoreTest, StateMachineGuards) {
  SessionRecord s = insert(alpha_, "starting");
  EXPECT_TRUE(*store_->set_ready(s.id, "2026-05-28T21:46:41.250Z", 1250));
  EXPECT_FALSE(*store_->set_ready(s.id, "2026-05-28T21:46:42.000Z", 2000));  // not starting
  EXPECT_TRUE(*store_->set_state(s.id, "running"));
  EXPECT_TRUE(*store_->set_state(s.id, "paused"));
  EXPECT_EQ(store_->set_state(s.id, "terminated").error().code, ErrorCode::invalid_argument);

  CleanupReport cleanup;
  cleanup.processes_killed = 3;
  cleanup.cgroup_removed = true;
  cleanup.error = "1 process left";
  cleanup.disk_used_bytes = 12345;
  cleanup.disk_written_bytes = 1ull << 33;
  cleanup.loop_detached = true;
  cleanup.volumes_released = 2;
  EXPECT_TRUE(*store_->set_terminated(s.id, "terminated", "deleted", "", cleanup));
  auto first = *store_->get_session(alpha_, s.id);
  EXPECT_EQ(first.state, "terminated");
  EXPECT_EQ(first.ready_at, "2026-05-28T21:46:41.250Z");
  EXPECT_EQ(first.startup_ms, 1250);
  EXPECT_EQ(first.termination_reason, "deleted");
  EXPECT_TRUE(parse_rfc3339(first.termination_at));
  EXPECT_EQ(first.cleanup, cleanup);

  // Final is final: a second DELETE or a late state change changes nothing.
  EXPECT_FALSE(*store_->set_terminated(s.id, "failed", "init_died", "late", std::nullopt));
  EXPECT_FALSE(*store_->set_state(s.id, "ready"));
  auto again = *store_->get_session(alpha_, s.id);
  EXPECT_EQ(again.state, "terminated");
  EXPECT_EQ(again.termination_reason, "deleted");
  EXPECT_EQ(again.termination_at, first.termination_at);
  EXPECT_FALSE(*store_->set_state("s-0000000000000000", "ready"));

  ASSERT_TRUE(store_->touch_activity(s.id, "2026-05-28T21:50:00.000Z"));
  EXPECT_EQ(store_->get_session_any(s.id)->last_activity_at, "2026-05-28T21:50:00.000Z");
}

TEST_F(StoreTest, LiveUsageSumsTheLiveSessions) {
  auto with_limits = [&](uint64_t memory_mb, double cpus, const char* state = "ready") {
    SessionRecord s = session(alpha_, state);
    s.limits.memory_mb = memory_mb;
    s.limits.cpus = cpus;
    return store_->insert_session(s);
  };
  ASSERT_TRUE(with_limits(512, 0.5));
  ASSERT_TRUE(with_limits(512, 1.0));
  ASSERT_TRUE(with_limits(4096, 2, "terminated"));  // not live
  auto usage = store_->live_usage(alpha_);
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->sessions, 2);
  EXPECT_EQ(usage->memory_mb, 1024);
  EXPECT_DOUBLE_EQ(usage->cpus, 1.5);
  // Other tenants are not counted against alpha; the host total counts everyone.
  insert(beta_);
  EXPECT_EQ(store_->live_usage(alpha_)->sessions, 2);
  EXPECT_EQ(store_->live_usage(std::nullopt)->sessions, 3);
}

// ---- Recovery ----

TEST_F(StoreTest, LiveSessionsAndClosingRunningExecs) {
  SessionRecord live1 = insert(alpha_, "running");
  SessionRecord live2 = insert(beta_, "paused");
  insert(alpha_, "starting");
  SessionRecord dead = insert(alpha_, "terminated");
  insert(beta_, "failed");

  auto live = store_->live_sessions();
  ASSERT_TRUE(live);
  std::set<std::string> states;
  for (const auto& s : *live) states.insert(s.state);
  EXPECT_EQ(live->size(), 3u);
  EXPECT_EQ(states, (std::set<std::string>{"running", "paused", "starting"}));

  ExecRecord r1 = exec(live1), r2 = exec(live1), r3 = exec(live2), done = exec(live1);
  for (auto* e : {&r1, &r2, &r3, &done}) ASSERT_TRUE(store_->insert_exec(*e));
  done.state = "exited";
  done.exit_code = 0;
  ASSERT_TRUE(*store_->finish_exec(done));
  EXPECT_EQ(store_->running_execs()->size(), 3u);

  EXPECT_EQ(*store_->close_running_execs("session ended", live2.id), 1);
  EXPECT_EQ(*store_->close_running_execs("daemon restarted"), 2);
  EXPECT_EQ(*store_->close_running_execs("daemon restarted"), 0);
  EXPECT_TRUE(store_->running_execs()->empty());

  auto closed = *store_->get_exec(alpha_, live1.id, r1.id);
  EXPECT_EQ(closed.state, "failed");
  EXPECT_EQ(closed.reason, "daemon restarted");
  EXPECT_TRUE(parse_rfc3339(closed.ended_at));
  ASSERT_TRUE(closed.duration_ms.has_value());
  EXPECT_GE(*closed.duration_ms, 0);
  EXPECT_EQ(store_->get_exec(beta_, live2.id, r3.id)->reason, "session ended");
  // An exec closed by recovery cannot be finished afterwards.
  r1.state = "exited";
  EXPECT_FALSE(*store_->finish_exec(r1));
  EXPECT_EQ(store_->get_exec(alpha_, live1.id, done.id)->state, "exited");
  (void)dead;
}

// ---- Execs and output ----

TEST_F(StoreTest, ExecLifecycleAndOutputIndex) {
  SessionRecord s = insert(alpha_);
  ExecRecord e = exec(s);
  e.started_at = "2026-05-28T21:46:40.000Z";
  ASSERT_TRUE(store_->insert_exec(e));
  ExecRecord shell = exec(s);
  shell.argv.clear();
  shell.cmd = "echo hi | wc -c";
  shell.started_at = "2026-05-28T21:46:41.000Z";
  ASSERT_TRUE(store_->insert_exec(shell));

  e.state = "oom_killed";
  e.signal = 9;
  e.reason = "memory limit 512 MiB reached; killed by OOM";
  e.ended_at = "2026-05-28T21:46:42.500Z";
  e.cpu_ms = 1800;
  e.peak_memory_bytes = 536870912;
  e.pids_peak = 7;
  e.stdout_bytes = 10;
  e.partial = true;
  e.pid = 42;  // known once it started: written with the outcome
  ASSERT_TRUE(*store_->finish_exec(e));
  EXPECT_FALSE(*store_->finish_exec(e));  // already final
  e.state = "running";
  EXPECT_EQ(store_->finish_exec(e).error().code, ErrorCode::invalid_argument);

  auto got = *store_->get_exec(alpha_, s.id, e.id);
  EXPECT_EQ(got.state, "oom_killed");
  EXPECT_EQ(got.argv, (std::vector<std::string>{"python3", "-c", "print(1)"}));
  EXPECT_EQ(got.signal, 9);
  EXPECT_FALSE(got.exit_code.has_value());
  EXPECT_EQ(got.duration_ms, 2500);  // ended - started when not given
  EXPECT_EQ(got.peak_memory_bytes, 536870912);
  EXPECT_EQ(got.pids_peak, 7);
  EXPECT_TRUE(got.partial);
  EXPECT_EQ(got.pid, 42);

  auto listed = store_->list_execs(s.id);
  ASSERT_TRUE(listed);
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[0].id, e.id);
  EXPECT_EQ((*listed)[1].cmd, "echo hi | wc -c");
  EXPECT_TRUE((*listed)[1].argv.empty());

  ASSERT_TRUE(store_->set_output({e.id, "stdout", "/state/s/e.stdout", 10, false}));
  ASSERT_TRUE(store_->set_output({e.id, "stderr", "/state/s/e.stderr", 0, false}));
  ASSERT_TRUE(store_->set_output({e.id, "stdout", "/state/s/e.stdout", 1 << 20, true}));
  auto outputs = store_->get_output(e.id);
  ASSERT_TRUE(outputs);
  ASSERT_EQ(outputs->size(), 2u);
  EXPECT_EQ((*outputs)[0].stream, "stderr");
  EXPECT_EQ((*outputs)[1].bytes, 1 << 20);
  EXPECT_TRUE((*outputs)[1].truncated);
  EXPECT_TRUE(store_->get_output(shell.id)->empty());
  EXPECT_FALSE(store_->set_output({"e-0000000000000000", "stdout", "/x", 0, false}));
  EXPECT_FALSE(store_->set_output({e.id, "stdin", "/x", 0, false}));
}

TEST_F(StoreTest, ExecEndWritesItsOutputIndexAndRecordInOneTransaction) {
  SessionRecord s = insert(alpha_);
  ExecRecord e = exec(s);
  ASSERT_TRUE(store_->insert_exec(e));
  e.state = "exited";
  e.exit_code = 0;
  e.stdout_bytes = 3;
  // An index row the schema refuses: nothing of the exec's end is written.
  std::vector<OutputRecord> bad{{e.id, "stdout", "/state/s/e.stdout", 3, false}, {e.id, "stdin", "/x", 0, false}};
  EXPECT_FALSE(store_->finish_exec(e, bad));
  EXPECT_EQ(store_->get_exec(alpha_, s.id, e.id)->state, "running");
  EXPECT_TRUE(store_->get_output(e.id)->empty());

  std::vector<OutputRecord> good{{e.id, "stdout", "/state/s/e.stdout", 3, false}};
  auto finished = store_->finish_exec(e, good);
  ASSERT_TRUE(finished) << finished.error().message();
  EXPECT_TRUE(*finished);
  EXPECT_EQ(store_->get_exec(alpha_, s.id, e.id)->state, "exited");
  ASSERT_EQ(store_->get_output(e.id)->size(), 1u);
  EXPECT_FALSE(*store_->finish_exec(e, good));  // already final
}

TEST(SqliteTest, StatementsAreCompiledOncePerTextAndResetBetweenUses) {
  TempDir dir;
  auto db = Db::open(dir.path() + "/t.db", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  ASSERT_TRUE(db) << db.error().message();
  ASSERT_TRUE(db->exec("CREATE TABLE t (v INTEGER); INSERT INTO t VALUES (1), (2), (3)", "setup"));
  const char* sql = "SELECT v FROM t ORDER BY v";
  sqlite3_stmt* first = nullptr;
  {
    auto st = db->prepare(sql, "read");
    ASSERT_TRUE(st);
    first = st->get();
    ASSERT_TRUE(*st->step());  // left mid-read: the next use starts over
    EXPECT_EQ(Row(*st).int64(), 1);
    // The same text open twice at once: its own statement.
    auto nested = db->prepare(sql, "read again");
    ASSERT_TRUE(nested);
    EXPECT_NE(nested->get(), first);
  }
  auto again = db->prepare(sql, "read");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->get(), first);
  ASSERT_TRUE(*again->step());
  EXPECT_EQ(Row(*again).int64(), 1);
  // Bindings do not carry over to the next use.
  {
    auto ins = db->prepare("INSERT INTO t VALUES (?)", "insert");
    ASSERT_TRUE(ins);
    ins->bind(int64_t{7});
    ASSERT_TRUE(ins->run());
  }
  auto ins = db->prepare("INSERT INTO t VALUES (?)", "insert");
  ASSERT_TRUE(ins && ins->run());
  EXPECT_EQ(*db->query_int64("SELECT count(*) FROM t WHERE v IS NULL", "count"), 1);
}

// ---- API JSON ----

TEST_F(StoreTest, JsonShapesFollowTheApi) {
  SessionRecord s = insert(alpha_, "ready");
  json::object live = api::render(*store_->get_session(alpha_, s.id));
  for (const char* key : {"id", "state", "template", "limits", "network", "created_at", "ready_at",
                          "expires_at", "metadata", "termination", "startup_ms"}) {
    EXPECT_TRUE(live.contains(key)) << key;
  }
  EXPECT_EQ(live.at("template"), "base@2026.11.29-2");
  EXPECT_TRUE(live.at("termination").is_null());
  EXPECT_TRUE(live.at("metadata").is_object());
  EXPECT_FALSE(live.contains("cleanup"));
  EXPECT_FALSE(live.contains("tenant_id"));

  ASSERT_TRUE(*store_->set_terminated(s.id, "terminated", "ttl_expired", "", CleanupReport{}));
  json::object ended = api::render(*store_->get_session(alpha_, s.id));
  ASSERT_TRUE(ended.at("termination").is_object());
  EXPECT_EQ(ended.at("termination").at("reason"), "ttl_expired");
  EXPECT_TRUE(ended.at("termination").at("at").is_string());
  EXPECT_TRUE(ended.contains("cleanup"));

  ExecRecord e = exec(s);
  json::object running = api::render(e);
  for (const char* key : {"id", "state", "exit_code", "signal", "reason", "started_at", "ended_at",
                          "duration_ms", "cpu_ms", "peak_memory_bytes", "pids_peak", "stdout_bytes",
                          "stderr_bytes", "output_truncated", "partial"}) {
    EXPECT_TRUE(running.contains(key)) << key;
  }
  EXPECT_EQ(running.at("state"), "running");
  EXPECT_TRUE(running.at("exit_code").is_null());
  EXPECT_TRUE(running.at("ended_at").is_null());
  EXPECT_TRUE(running.at("argv").is_array());
  e.exit_code = 0;
  EXPECT_EQ(api::render(e).at("exit_code").as_int64(), 0);
}

// ---- Concurrency ----

TEST_F(StoreTest, ConcurrentWritersFromThreadsAndConnections) {
  SessionRecord s = insert(alpha_, "running");
  // A second connection to the same file: its writes contend for the SQLite write
  // lock with ours and must wait (busy timeout), not fail with SQLITE_BUSY.
  auto other = Store::open(db_path_);
  ASSERT_TRUE(other);
  std::atomic<int> failures{0};
  std::string first_error;
  std::mutex error_mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    Store* store = t % 2 == 0 ? store_.get() : other->get();
    threads.emplace_back([&, store] {
      for (int i = 0; i < 50; ++i) {
        ExecRecord e = exec(s);
        auto inserted = store->insert_exec(e);
        e.state = "exited";
        e.exit_code = 0;
        auto finished = inserted ? store->finish_exec(e) : Result<bool>(false);
        if (!inserted || !finished || !*finished) {
          ++failures;
          std::lock_guard lock(error_mu);
          if (first_error.empty()) {
            first_error = !inserted ? inserted.error().message()
                                    : (!finished ? finished.error().message() : "not running");
          }
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0) << first_error;
  EXPECT_EQ(store_->list_execs(s.id)->size(), 200u);
  EXPECT_TRUE(store_->running_execs()->empty());
}

// ---- Time and ids ----

TEST(StoreTimeTest, Rfc3339RoundTripsAndParsesOffsets) {
  EXPECT_EQ(format_rfc3339(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(format_rfc3339(-1), "1969-12-31T23:59:59.999Z");
  const int64_t t = 1'795'950'300'123;  // 2026-11-29
  const std::string text = format_rfc3339(t);
  EXPECT_EQ(text, "2026-11-29T11:05:00.123Z");
  EXPECT_EQ(*parse_rfc3339(text), t);
  EXPECT_EQ(*parse_rfc3339("2026-11-29T13:05:00.123+02:00"), t);
  EXPECT_EQ(*parse_rfc3339("2026-11-29T06:05:00.1234567-05:00"), t);
  EXPECT_EQ(*parse_rfc3339("2026-11-29t11:05:00z"), t - 123);
  EXPECT_EQ(*parse_rfc3339("2026-11-29T11:05:00.1Z"), t - 23);
  EXPECT_EQ(*parse_rfc3339("2016-12-31T23:59:60Z"), *parse_rfc3339("2017-01-01T00:00:00Z"));
  for (const char* bad :
       {"", "2026-11-29", "2026-11-29T10:25:00", "2026-13-01T00:00:00Z", "2026-02-30T00:00:00Z",
        "2026-11-29T10:25:00.Z", "2026-11-29T10:25:00+0200", "2026-11-29T10:25:00Zjunk"}) {
    EXPECT_FALSE(parse_rfc3339(bad)) << bad;
  }
  const int64_t before = now_ms();
  EXPECT_LE(before, *parse_rfc3339(now_rfc3339()) + 1);
}

TEST(StoreTimeTest, NewIdsArePrefixedRandomHex) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string id = new_id("s");
    ASSERT_EQ(id.size(), 18u);
    ASSERT_EQ(id.rfind("s-", 0), 0u);
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef", 2), std::string::npos) << id;
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

// A pooled sandbox is recorded before it boots (recovery finds it) and becomes a
// session row in the same transaction that forgets the pooled row; only once.
TEST_F(StoreTest, PooledSessionIsClaimedOnceIntoATenantsSession) {
  SessionRecord s = session(alpha_, "ready");
  ASSERT_TRUE(store_->insert_pooled(s.id, "base"));
  auto ids = store_->pooled_ids();
  ASSERT_TRUE(ids);
  EXPECT_EQ(*ids, std::vector<std::string>{s.id});
  auto usage = store_->live_usage(alpha_);
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->sessions, 0) << "a pooled sandbox belongs to no tenant";
  auto claimed = store_->claim_pooled(s);
  ASSERT_TRUE(claimed) << claimed.error().message();
  EXPECT_TRUE(store_->pooled_ids()->empty());
  auto got = store_->get_session(alpha_, s.id);
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got->state, "ready");
  EXPECT_EQ(store_->live_usage(alpha_)->sessions, 1);
  // Claimed already: a second claim changes nothing.
  SessionRecord again = s;
  again.tenant_id = beta_;
  EXPECT_FALSE(store_->claim_pooled(again));
  EXPECT_FALSE(store_->get_session(beta_, s.id));
  ASSERT_TRUE(store_->insert_pooled("s-00000000000000aa", "base"));
  ASSERT_TRUE(store_->remove_pooled("s-00000000000000aa"));
  EXPECT_TRUE(store_->pooled_ids()->empty());
}

}  // namespace

// ---- Package installs ----

TEST_F(StoreTest, PackageInstallsArePagedScopedAndGoWithTheSession) {
  SessionRecord s = insert(alpha_);
  for (int i = 0; i < 3; ++i) {
    PackageInstallRecord rec{.session_id = s.id, .tenant_id = alpha_, .at = now_rfc3339(), .manager = "pypi",
                             .name = "pkg" + std::to_string(i), .version = "1.0", .registry = "https://r.invalid",
                             .sha256 = std::string(64, 'a'), .size = 10 + i, .verdict = i == 1 ? "denied" : "allowed",
                             .rule = "allow pypi:*", .reason = "", .cache_hit = i == 2};
    ASSERT_TRUE(store_->insert_package_install(rec));
  }
  auto first = store_->list_package_installs(alpha_, s.id, PageRequest{.limit = 2, .cursor = ""});
  ASSERT_TRUE(first) << first.error().message();
  ASSERT_EQ(first->records.size(), 2u);
  EXPECT_EQ(first->records[0].name, "pkg0");
  EXPECT_EQ(first->records[1].verdict, "denied");
  ASSERT_FALSE(first->next_cursor.empty());
  auto second = store_->list_package_installs(alpha_, s.id, PageRequest{.limit = 2, .cursor = first->next_cursor});
  ASSERT_TRUE(second);
  ASSERT_EQ(second->records.size(), 1u);
  EXPECT_TRUE(second->records[0].cache_hit);
  EXPECT_EQ(second->records[0].size, 12);
  EXPECT_TRUE(second->next_cursor.empty());
  // Another tenant's session is not_found, as for an id that never existed.
  auto foreign = store_->list_package_installs(beta_, s.id, PageRequest{});
  ASSERT_FALSE(foreign);
  EXPECT_EQ(foreign.error().code, ErrorCode::not_found);
  // Purged with the session.
  ASSERT_TRUE(store_->set_terminated(s.id, "terminated", "deleted", "", std::nullopt));
  ASSERT_TRUE(store_->purge_ended_before("9999-01-01T00:00:00.000Z"));
  EXPECT_FALSE(store_->list_package_installs(alpha_, s.id, PageRequest{}));
}

namespace cela::store {
namespace {

TEST_F(StoreTest, SecretsAreTenantScopedAndExpire) {
  SecretRecord s{alpha_, "TOKEN", "c2VhbGVk", "k-1", "2026-01-01T00:00:00.000Z", "", 0};
  ASSERT_TRUE(store_->put_secret(s));
  SecretRecord old{alpha_, "OLD", "c2VhbGVk", "k-1", "2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", 1};
  ASSERT_TRUE(store_->put_secret(old));
  const std::string now = "2026-06-01T00:00:00.000Z";
  auto got = store_->get_secret(alpha_, "TOKEN", now);
  ASSERT_TRUE(got) << got.error().message();
  EXPECT_EQ(got->sealed, "c2VhbGVk");
  EXPECT_EQ(store_->get_secret(beta_, "TOKEN", now).error().code, ErrorCode::not_found);
  EXPECT_EQ(store_->get_secret(alpha_, "OLD", now).error().code, ErrorCode::not_found);
  auto list = store_->list_secrets(alpha_, now);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 1u);  // the expired one is purged
  EXPECT_TRUE(*store_->delete_secret(alpha_, "TOKEN"));
  EXPECT_FALSE(*store_->delete_secret(alpha_, "TOKEN"));
}

}  // namespace
}  // namespace cela::store
