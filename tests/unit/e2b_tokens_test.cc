// Per-sandbox E2B tokens (api/e2b/tokens.h): bound to one kind, one tenant, one session.
#include <gtest/gtest.h>

#include <string>

#include "api/e2b/tokens.h"

using namespace cela::api::e2b;

namespace {
const std::string kSecret(64, 'a');
}

TEST(E2bTokens, ATokenOpensItsOwnSandboxOnly) {
  SandboxTokens tokens(kSecret);
  std::string t = tokens.issue(TokenKind::envd, "t-1", "s-1");
  EXPECT_TRUE(t.starts_with("t-1."));
  EXPECT_EQ(tokens.verify(TokenKind::envd, t, "s-1"), "t-1");
  EXPECT_EQ(tokens.verify(TokenKind::envd, t, "s-2"), std::nullopt);      // another sandbox
  EXPECT_EQ(tokens.verify(TokenKind::traffic, t, "s-1"), std::nullopt);   // another kind
  EXPECT_EQ(tokens.verify(TokenKind::envd, t.substr(0, t.size() - 1) + (t.back() == '0' ? "1" : "0"),
                          "s-1"),
            std::nullopt);  // one digit changed
  // Claiming another tenant with the same MAC fails: the tenant is part of what is signed.
  std::string mac = t.substr(t.find('.') + 1);
  EXPECT_EQ(tokens.verify(TokenKind::envd, "t-2." + mac, "s-1"), std::nullopt);
  EXPECT_EQ(tokens.verify(TokenKind::envd, "", "s-1"), std::nullopt);
  EXPECT_EQ(tokens.verify(TokenKind::envd, "." + mac, "s-1"), std::nullopt);
  // Another daemon secret issues other tokens.
  SandboxTokens other(std::string(64, 'b'));
  EXPECT_EQ(other.verify(TokenKind::envd, t, "s-1"), std::nullopt);
  EXPECT_NE(tokens.issue(TokenKind::traffic, "t-1", "s-1"), t);
}
