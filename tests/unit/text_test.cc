// Text that leaves cela for a person or a JSON parser: UTF-8 repair (common/encoding.h),
// JSON answers that stay UTF-8 (common/json_text.h), and the terminal escaping of
// sandbox output (common/terminal_text.h).
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/encoding.h"
#include "common/fs.h"
#include "common/json_text.h"
#include "common/terminal_text.h"

using namespace cela;
namespace json = boost::json;

TEST(PathComponents, DropEmptyAndDotKeepDotDot) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(cela::path_components("/a//b/./c/"), (V{"a", "b", "c"}));
  EXPECT_EQ(cela::path_components("../x/.."), (V{"..", "x", ".."}));
  EXPECT_EQ(cela::path_components(""), V{});
  EXPECT_EQ(cela::path_components("/"), V{});
  EXPECT_EQ(cela::path_components("."), V{});
}

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

namespace {
std::string escaped(std::string_view in) {
  TerminalEscaper e;
  return e.feed(in) + e.finish();
}
}  // namespace

TEST(TerminalEscaper, ControlSequencesAreShownNotActedOn) {
  EXPECT_EQ(escaped("\x1b]0;title\x07"), "\\x1b]0;title\\x07");             // OSC: window title
  EXPECT_EQ(escaped("\x1b]52;c;aGk=\x1b\\"), "\\x1b]52;c;aGk=\\x1b\\");     // OSC 52: clipboard
  EXPECT_EQ(escaped("\x1b[2J\x1b[31mred"), "\\x1b[2J\\x1b[31mred");         // CSI
  EXPECT_EQ(escaped("\xc2\x9b" "6n"), "\\u009b6n");                         // C1 CSI as UTF-8
  EXPECT_EQ(escaped("\x9b" "6n"), "\\x9b6n");                               // 8-bit CSI
  EXPECT_EQ(escaped(std::string("a\0b\x7f\x08", 5)), "a\\x00b\\x7f\\x08");
}

TEST(TerminalEscaper, TextNewlinesTabsAndCarriageReturnsPass) {
  EXPECT_EQ(escaped("line\n\tx\r\n"), "line\n\tx\r\n");
  EXPECT_EQ(escaped("é € 😀 \xc2\xa0"), "é € 😀 \xc2\xa0");  // U+00A0 is not a C1 control
  EXPECT_EQ(escaped("\\x1b"), "\\x1b");
}

TEST(TerminalEscaper, CharactersCutAcrossChunksArriveWhole) {
  const std::string text = "é€😀\xc2\x9b";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    TerminalEscaper e;
    std::string out = e.feed(text.substr(0, cut));
    out += e.feed(text.substr(cut));
    out += e.finish();
    EXPECT_EQ(out, "é€😀\\u009b") << cut;
  }
  // A stream that ends mid-character shows the bytes it had.
  TerminalEscaper e;
  EXPECT_EQ(e.feed("ok\xe2\x82"), "ok");
  EXPECT_EQ(e.finish(), "\\xe2\\x82");
  // A cut character spoiled by the next chunk is escaped, the rest kept.
  TerminalEscaper f;
  EXPECT_EQ(f.feed("\xe2"), "");
  EXPECT_EQ(f.feed("x\x1b"), "\\xe2x\\x1b");
}
