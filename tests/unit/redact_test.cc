// obs/redact: the forms of a value, whole-string redaction, and the streaming matcher
// under random chunkings (a seeded property test).
#include "obs/redact.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "common/encoding.h"

namespace cela::obs {
namespace {

std::string stream_through(const std::shared_ptr<const Redactions>& r, std::string_view text,
                           const std::vector<size_t>& cuts) {
  StreamRedactor s(r);
  std::string out;
  size_t pos = 0;
  for (size_t cut : cuts) {
    s.feed(text.substr(pos, cut - pos), out);
    pos = cut;
  }
  s.feed(text.substr(pos), out);
  s.flush(out);
  return out;
}

std::vector<size_t> random_cuts(std::mt19937_64& rng, size_t size) {
  std::vector<size_t> cuts;
  if (size == 0) return cuts;
  std::uniform_int_distribution<int> mode(0, 2);
  switch (mode(rng)) {
    case 0:  // one byte per write
      for (size_t i = 1; i < size; ++i) cuts.push_back(i);
      break;
    case 1: {  // a few random cuts
      std::uniform_int_distribution<size_t> at(0, size);
      for (int i = 0; i < 8; ++i) cuts.push_back(at(rng));
      std::ranges::sort(cuts);
      break;
    }
    default: {  // small random chunks
      std::uniform_int_distribution<size_t> len(1, 7);
      for (size_t p = len(rng); p < size; p += len(rng)) cuts.push_back(p);
    }
  }
  return cuts;
}

std::string random_bytes(std::mt19937_64& rng, size_t n, std::string_view alphabet) {
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  std::string s;
  for (size_t i = 0; i < n; ++i) s += alphabet[pick(rng)];
  return s;
}

TEST(Redact, FormsCoverEncodings) {
  std::string v = "s3cr/t+v=lue ok";
  auto forms = redaction_forms(v);
  auto has = [&](const std::string& f) { return std::ranges::find(forms, f) != forms.end(); };
  EXPECT_EQ(forms.front(), v);
  EXPECT_TRUE(has(hex_encode(v)));
  EXPECT_TRUE(has(base64_encode(v)));
  EXPECT_TRUE(has("s3cr%2Ft%2Bv%3Dlue%20ok"));
  EXPECT_TRUE(has("s3cr/t%2Bv%3Dlue+ok"));
}

TEST(Redact, WholeStringsAndEveryEncoding) {
  std::string v = "hunter2-TOKEN/xyz+";
  auto r = Redactions::build({{"GH", v}});
  EXPECT_EQ(r->redact("a " + v + " b"), "a [REDACTED:GH] b");
  EXPECT_EQ(r->redact(hex_encode(v)), "[REDACTED:GH]");
  EXPECT_EQ(r->redact(base64_encode(v)), "[REDACTED:GH]");
  // `echo $S | base64`: the value followed by a newline, and at the other alignments.
  for (std::string prefix : {"", "x", "xy"}) {
    std::string enc = base64_encode(prefix + v + "\n");
    std::string out = r->redact(enc);
    EXPECT_NE(out.find("[REDACTED:GH]"), std::string::npos) << prefix;
    // What is left decodes to at most the neighbouring bytes, never 8 bytes of the value.
    EXPECT_LE(out.size() - std::string("[REDACTED:GH]").size(), 8u) << out;
  }
  EXPECT_EQ(r->redact("hunter2-TOKEN%2Fxyz%2B"), "[REDACTED:GH]");
  EXPECT_EQ(r->redact("nothing here"), "nothing here");
  EXPECT_TRUE(r->contains("..." + v));
  EXPECT_FALSE(r->contains("hunter2-TOKEN/xy"));
}

TEST(Redact, OverlappingOccurrencesMerge) {
  auto r = Redactions::build({{"A", "abcdef"}, {"B", "defghi"}});
  EXPECT_EQ(r->redact("xxabcdefghiyy"), "xx[REDACTED:A]yy");
  EXPECT_EQ(r->redact("abcdef defghi"), "[REDACTED:A] [REDACTED:B]");
}

TEST(Redact, HoldsOnlyAPossiblePrefix) {
  auto r = Redactions::build({{"K", "supersecret"}});
  StreamRedactor s(r);
  std::string out;
  s.feed("hello sup", out);
  EXPECT_EQ(out, "hello ");  // "sup" may begin the secret
  EXPECT_EQ(s.held(), 3u);
  s.feed("er", out);
  EXPECT_EQ(out, "hello ");
  s.feed("man", out);  // not the secret after all: released at once
  EXPECT_EQ(out, "hello superman");
  EXPECT_EQ(s.held(), 0u);
  s.feed(" supersec", out);
  s.flush(out);  // the stream ended: a prefix is released as it is
  EXPECT_EQ(out, "hello superman supersec");
}

// The property: for random secrets, random text around them and random chunkings, the
// streamed output equals the whole-string redaction, holds no value, and text without
// any secret passes byte for byte.
TEST(Redact, RandomChunkingsNeverLeak) {
  std::mt19937_64 rng(20261201);
  const std::string alphabet = "abcdefgh0123+/=%- \n";
  for (int round = 0; round < 400; ++round) {
    std::vector<SecretValue> secrets;
    std::uniform_int_distribution<int> count(1, 4), len(6, 24);
    int n = count(rng);
    for (int i = 0; i < n; ++i) secrets.push_back({"S" + std::to_string(i), random_bytes(rng, len(rng), alphabet)});
    auto r = Redactions::build(secrets);

    std::string text;
    std::uniform_int_distribution<int> pieces(1, 6), form_kind(0, 3), filler(0, 20);
    for (int p = pieces(rng); p > 0; --p) {
      text += random_bytes(rng, filler(rng), alphabet);
      const auto& s = secrets[static_cast<size_t>(p) % secrets.size()];
      switch (form_kind(rng)) {
        case 0: text += s.value; break;
        case 1: text += hex_encode(s.value); break;
        case 2: text += base64_encode(s.value); break;
        default: text += redaction_forms(s.value).back(); break;
      }
    }
    text += random_bytes(rng, filler(rng), alphabet);

    std::string whole = r->redact(text);
    for (const auto& s : secrets) ASSERT_EQ(whole.find(s.value), std::string::npos) << whole;
    for (int k = 0; k < 5; ++k) {
      auto cuts = random_cuts(rng, text.size());
      std::string streamed = stream_through(r, text, cuts);
      ASSERT_EQ(streamed, whole) << "round " << round;
      for (const auto& s : secrets) {
        ASSERT_EQ(streamed.find(s.value), std::string::npos);
        ASSERT_EQ(streamed.find(hex_encode(s.value)), std::string::npos);
        ASSERT_EQ(streamed.find(base64_encode(s.value)), std::string::npos);
      }
    }

    // Text that holds no form of any secret is unchanged by any chunking.
    std::string plain = random_bytes(rng, 200, "ijklmnopqrstuvwxyzIJKLMNOP.,;:");
    ASSERT_FALSE(r->contains(plain));
    ASSERT_EQ(stream_through(r, plain, random_cuts(rng, plain.size())), plain);
  }
}

TEST(Redact, BinaryAndEmpty) {
  auto none = Redactions::build({});
  EXPECT_TRUE(none->empty());
  StreamRedactor s(none);
  std::string out;
  std::string bin("\0\xff\x01", 3);
  s.feed(bin, out);
  EXPECT_EQ(out, bin);
  auto r = Redactions::build({{"Z", std::string("\0\x01zz\xfe", 5)}});
  EXPECT_EQ(r->redact(std::string("a\0\x01zz\xfe" "b", 7)), "a[REDACTED:Z]b");
}

}  // namespace
}  // namespace cela::obs
