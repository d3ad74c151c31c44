#include "common/units.h"

#include <gtest/gtest.h>

using namespace cela;
using std::chrono::milliseconds;

TEST(ParseSize, AcceptsBinarySuffixes) {
  EXPECT_EQ(parse_size("512").value(), 512u);
  EXPECT_EQ(parse_size("512b").value(), 512u);
  EXPECT_EQ(parse_size("4k").value(), 4096u);
  EXPECT_EQ(parse_size("512m").value(), 512ull << 20);
  EXPECT_EQ(parse_size("512MiB").value(), 512ull << 20);
  EXPECT_EQ(parse_size("2G").value(), 2ull << 30);
  EXPECT_EQ(parse_size("1.5g").value(), 3ull << 29);
  EXPECT_EQ(parse_size("1t").value(), 1ull << 40);
}

TEST(ParseSize, RejectsGarbage) {
  for (const char* bad : {"", "m", "12x", "-1m", "0", "0m", "1.5", "1..5m", "1 m", "99999999999999999999t"}) {
    auto r = parse_size(bad);
    EXPECT_FALSE(r.has_value()) << bad;
    if (!r) {
      EXPECT_EQ(r.error().code, ErrorCode::invalid_argument) << bad;
    }
  }
}

TEST(ParseDuration, AcceptsUnitsAndCombinations) {
  EXPECT_EQ(parse_duration("30").value(), milliseconds(30'000));
  EXPECT_EQ(parse_duration("30s").value(), milliseconds(30'000));
  EXPECT_EQ(parse_duration("250ms").value(), milliseconds(250));
  EXPECT_EQ(parse_duration("1m30s").value(), milliseconds(90'000));
  EXPECT_EQ(parse_duration("2h").value(), milliseconds(7'200'000));
  EXPECT_EQ(parse_duration("0.5s").value(), milliseconds(500));
}

TEST(ParseDuration, RejectsGarbage) {
  for (const char* bad : {"", "s", "10x", "-1s", "0s", "0", "1s2", "5 s", "0.0001s"}) {
    EXPECT_FALSE(parse_duration(bad).has_value()) << bad;
  }
}

TEST(Format, SizesAndDurationsReadWell) {
  EXPECT_EQ(format_size(512ull << 20), "512 MiB");
  EXPECT_EQ(format_size(3ull << 29), "1.5 GiB");
  EXPECT_EQ(format_size(100), "100 B");
  EXPECT_EQ(format_duration(250), "250 ms");
  EXPECT_EQ(format_duration(30'000), "30 s");
  EXPECT_EQ(format_duration(1'500), "1.5 s");
  EXPECT_EQ(format_duration(300'000), "5 min");
}
