// Redaction of secret values (SECURITY.md "Secrets"): every granted value, and its
// base64, URL-encoded and hex forms, becomes `[REDACTED:NAME]` in everything the
// daemon shows: live output, kept output, records, errors, events, audit, logs.
//
// Patterns. Each secret contributes the value itself and its encodings
// (redaction_forms): lower and upper case hex; percent-encoding of every byte outside
// RFC 3986's unreserved set (upper and lower case hex digits, '/' kept or not, space as
// '+' or %20); base64 in the standard and the URL-safe alphabet, both padded whole and
// as the run of characters that depend only on the value's bytes at each of the three
// alignments the value can have inside a longer encoded text (so `base64 <<<"x$S"` and
// `echo $S | base64` are caught too). Forms shorter than kMinFormBytes are left out
// (they would redact ordinary text); the value itself is always a pattern.
//
// Matching is one Aho-Corasick automaton over all patterns (dense transitions over
// byte classes; each state knows the longest pattern ending there), and the union of
// every occurrence of every pattern is replaced: overlapping occurrences merge into one
// marker named after the first. Nothing of an occurrence survives, whatever else it
// overlaps.
//
// Streams. StreamRedactor cuts a stream anywhere a chunk ends and still finds every
// occurrence: it holds back (the carry-over window) the bytes that may begin a pattern
// not yet complete, i.e. the automaton's current depth, at most the longest pattern
// minus one byte, plus an occurrence that a longer one might still extend. Latency:
// output that ends with a prefix of a secret or of one of its forms (a shell printing
// "ab" when a secret starts "ab…") is held until more bytes come or the stream ends
// (flush()); it is never released on a timer, since a secret written one byte per
// write, slowly, would then leak. Output that shares no prefix with any pattern passes
// at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cela::obs {

struct SecretValue {
  std::string name;
  std::string value;
};

// Shorter encoded forms are not patterns.
inline constexpr size_t kMinFormBytes = 4;

// The distinct byte strings that stand for `value` (the value first).
std::vector<std::string> redaction_forms(std::string_view value);

// The compiled patterns of a set of secrets; immutable, shared by every stream.
class Redactions {
 public:
  // Secrets with an empty value are ignored.
  static std::shared_ptr<const Redactions> build(const std::vector<SecretValue>& secrets);
  ~Redactions();

  bool empty() const { return patterns_.empty(); }
  size_t pattern_count() const { return patterns_.size(); }
  size_t longest() const { return longest_; }
  // `text` with every occurrence replaced (for whole strings: records, errors, logs).
  std::string redact(std::string_view text) const;
  // True when `text` holds an occurrence of any pattern (export scanning).
  bool contains(std::string_view text) const;

 private:
  friend class StreamRedactor;
  Redactions() = default;
  struct Pattern {
    uint32_t secret;  // index into names_
    uint32_t length;
  };
  uint32_t step(uint32_t state, unsigned char byte) const {
    return next_[static_cast<size_t>(state) * classes_ + byte_class_[byte]];
  }

  std::vector<std::string> names_;
  std::vector<Pattern> patterns_;
  uint8_t byte_class_[256] = {};
  uint32_t classes_ = 1;
  std::vector<uint32_t> next_;     // state * classes_ + class -> state
  std::vector<uint32_t> depth_;    // length of the string a state stands for
  std::vector<int32_t> longest_out_;  // pattern index of the longest match ending here, -1
  size_t longest_ = 0;
};

// One stream's redaction, chunk by chunk. Not thread-safe (one per stream).
class StreamRedactor {
 public:
  explicit StreamRedactor(std::shared_ptr<const Redactions> redactions);
  // Appends to `out` what can be released of `in` (and of what was held before).
  void feed(std::string_view in, std::string& out);
  // The stream ended: appends everything still held, redacted.
  void flush(std::string& out);
  // Bytes held back now.
  size_t held() const { return buf_.size(); }

 private:
  struct Span {
    size_t begin, end;  // in buf_
    uint32_t secret;
  };
  void release(size_t upto, std::string& out);

  std::shared_ptr<const Redactions> r_;
  uint32_t state_ = 0;
  std::string buf_;         // held bytes (the carry-over), then the chunk being scanned
  std::vector<Span> spans_;  // occurrences found in buf_, sorted, disjoint
};

// "[REDACTED:NAME]"
std::string redaction_marker(std::string_view name);

}  // namespace cela::obs
