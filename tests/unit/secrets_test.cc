// session/secrets: AES-256-GCM sealing bound to tenant and name.
#include "session/secrets.h"

#include <gtest/gtest.h>

#include "common/random.h"

namespace cela::session {
namespace {

TEST(Secrets, SealOpensOnlyForItsTenantAndName) {
  std::string key = random_bytes(32);
  auto sealed = Secrets::seal(key, "t-1", "TOKEN", "the value");
  ASSERT_TRUE(sealed);
  EXPECT_EQ(sealed->find("the value"), std::string::npos);
  auto again = Secrets::seal(key, "t-1", "TOKEN", "the value");
  EXPECT_NE(*sealed, *again);  // a fresh nonce per record
  auto open = Secrets::unseal(key, "t-1", "TOKEN", *sealed);
  ASSERT_TRUE(open);
  EXPECT_EQ(open->view(), "the value");
  EXPECT_FALSE(Secrets::unseal(key, "t-2", "TOKEN", *sealed));
  EXPECT_FALSE(Secrets::unseal(key, "t-1", "OTHER", *sealed));
  EXPECT_FALSE(Secrets::unseal(random_bytes(32), "t-1", "TOKEN", *sealed));
  std::string tampered = *sealed;
  tampered[20] = tampered[20] == 'A' ? 'B' : 'A';
  EXPECT_FALSE(Secrets::unseal(key, "t-1", "TOKEN", tampered));
}

TEST(Secrets, Names) {
  EXPECT_TRUE(check_secret_name("GH_TOKEN"));
  EXPECT_TRUE(check_secret_name("_a.b-c"));
  EXPECT_FALSE(check_secret_name(""));
  EXPECT_FALSE(check_secret_name("1abc"));
  EXPECT_FALSE(check_secret_name("a/b"));
  EXPECT_FALSE(check_secret_name("a b"));
}

}  // namespace
}  // namespace cela::session
