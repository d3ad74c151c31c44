// Text that leaves cela for a JSON parser: UTF-8 repair (common/encoding.h) and JSON
// answers that stay UTF-8 (common/json_text.h).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

#include "common/encoding.h"
#include "common/json_text.h"

using namespace cela;
namespace json = boost::json;

TEST(Utf8, SequenceAtTellsWholeBadAndCut) {
  EXPECT_EQ(utf8_sequence_at("a", 0), 1);
  EXPECT_EQ(utf8_sequence_at("\xc3\xa9", 0), 2);
  EXPECT_EQ(utf8_sequence_at("\xe2\x82\xac", 0), 3);
  EXPECT_EQ(utf8_sequence_at("\xf0\x9f\x98\x80", 0), 4);
  EXPECT_EQ(utf8_sequence_at("\xff", 0), 0);
  EXPECT_EQ(utf8_sequence_at("\xc0\x80", 0), 0);      // overlong
  EXPECT_EQ(utf8_sequence_at("\xed\xa0\x80", 0), 0);  // surrogate
  EXPECT_EQ(utf8_sequence_at("\xc3(", 0), 0);
  EXPECT_EQ(utf8_sequence_at("\xc3", 0), -1);
  EXPECT_EQ(utf8_sequence_at("\xe2\x82", 0), -1);
  EXPECT_EQ(utf8_sequence_at("\xe2(", 0), 0);
}

TEST(Utf8, LossyReplacesEachBadByteAndKeepsGoodText) {
  EXPECT_EQ(utf8_lossy("plain é"), "plain é");
  EXPECT_EQ(utf8_lossy("a\xff" "b\xc3"), "a\xef\xbf\xbd" "b\xef\xbf\xbd");
  EXPECT_EQ(utf8_lossy("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_TRUE(valid_utf8(utf8_lossy("\x80\x81\xfe\xed\xa0\x80x")));
}

TEST(JsonText, AnswersAreUtf8EvenWhenAStringIsNot) {
  json::object o{{"name", "a\xff" "b"}, {"ok", "é"}};
  o["k\xfe"] = 1;
  std::string text = json_text(o);
  EXPECT_TRUE(valid_utf8(text)) << text;
  auto back = json::parse(text).as_object();
  EXPECT_EQ(back.at("name").as_string(), "a\xef\xbf\xbd" "b");
  EXPECT_EQ(back.at("ok").as_string(), "é");
  EXPECT_TRUE(back.contains("k\xef\xbf\xbd"));
}
