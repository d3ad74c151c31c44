#include "obs/redact.h"

#include "common/encoding.h"

#include <algorithm>
#include <cctype>
#include <deque>
#include <limits>

namespace cela::obs {
namespace {

constexpr uint32_t kNone = std::numeric_limits<uint32_t>::max();

void add_form(std::vector<std::string>& forms, std::string s) {
  if (s.size() < kMinFormBytes) return;
  if (std::ranges::find(forms, s) == forms.end()) forms.push_back(std::move(s));
}

std::string upper_hex(std::string_view v) {
  std::string out = hex_encode(v);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

bool unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
         c == '_' || c == '~';
}

std::string percent(std::string_view v, bool upper, bool keep_slash, bool plus_for_space) {
  const char* digits = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  for (unsigned char c : v) {
    if (unreserved(c) || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else if (plus_for_space && c == ' ') {
      out += '+';
    } else {
      out += '%';
      out += digits[c >> 4];
      out += digits[c & 15];
    }
  }
  return out;
}

constexpr const char* kB64Std = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
constexpr const char* kB64Url = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

// The base64 characters of `bytes` (no padding; the last one zero-filled).
std::string b64_chars(std::string_view bytes, const char* alphabet) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (unsigned char c : bytes) {
    acc = (acc << 8) | c;
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out += alphabet[(acc >> bits) & 63];
    }
  }
  if (bits > 0) out += alphabet[(acc << (6 - bits)) & 63];
  return out;
}

// The characters that depend only on the value when it starts `k` bytes into the
// encoded text: bits [8k, 8(k+n)) of the stream.
std::string b64_run(std::string_view v, size_t k, const char* alphabet) {
  std::string bytes(k, '\0');
  bytes.append(v);
  std::string all = b64_chars(bytes, alphabet);
  size_t first = (8 * k + 5) / 6;
  size_t last = (8 * (k + v.size())) / 6;  // exclusive
  if (last <= first) return {};
  return all.substr(first, last - first);
}

std::string b64_padded(std::string_view v, const char* alphabet) {
  std::string out = b64_chars(v, alphabet);
  while (out.size() % 4) out += '=';
  return out;
}

}  // namespace

std::string redaction_marker(std::string_view name) { return "[REDACTED:" + std::string(name) + "]"; }

std::vector<std::string> redaction_forms(std::string_view value) {
  std::vector<std::string> forms;
  if (value.empty()) return forms;
  forms.emplace_back(value);
  add_form(forms, hex_encode(value));
  add_form(forms, upper_hex(value));
  for (bool upper : {true, false})
    for (bool keep_slash : {false, true})
      for (bool plus : {false, true}) add_form(forms, percent(value, upper, keep_slash, plus));
  for (const char* alphabet : {kB64Std, kB64Url}) {
    add_form(forms, b64_padded(value, alphabet));
    for (size_t k = 0; k < 3; ++k) add_form(forms, b64_run(value, k, alphabet));
  }
  return forms;
}

Redactions::~Redactions() = default;

std::shared_ptr<const Redactions> Redactions::build(const std::vector<SecretValue>& secrets) {
  std::shared_ptr<Redactions> r(new Redactions());
  std::vector<std::pair<std::string, uint32_t>> patterns;  // bytes, secret
  for (const auto& s : secrets) {
    if (s.value.empty()) continue;
    auto id = static_cast<uint32_t>(r->names_.size());
    r->names_.push_back(s.name);
    for (auto& f : redaction_forms(s.value)) patterns.emplace_back(std::move(f), id);
  }
  // Byte classes: one per byte that occurs in a pattern, class 0 for all others.
  for (const auto& [p, id] : patterns)
    for (unsigned char c : p)
      if (!r->byte_class_[c]) r->byte_class_[c] = static_cast<uint8_t>(r->classes_++);
  const uint32_t k = r->classes_;

  // The trie.
  r->next_.assign(k, kNone);
  r->depth_.assign(1, 0);
  std::vector<int32_t> terminal(1, -1);
  for (const auto& [p, id] : patterns) {
    uint32_t s = 0;
    for (unsigned char c : p) {
      uint32_t& t = r->next_[static_cast<size_t>(s) * k + r->byte_class_[c]];
      if (t == kNone) {
        t = static_cast<uint32_t>(r->depth_.size());
        r->depth_.push_back(r->depth_[s] + 1);
        r->next_.resize(r->next_.size() + k, kNone);
        terminal.push_back(-1);
      }
      s = r->next_[static_cast<size_t>(s) * k + r->byte_class_[c]];
    }
    if (terminal[s] < 0) {  // the same bytes for two secrets: the first names them
      terminal[s] = static_cast<int32_t>(r->patterns_.size());
      r->patterns_.push_back({id, static_cast<uint32_t>(p.size())});
      r->longest_ = std::max(r->longest_, p.size());
    }
  }

  // Failure links, folded into the dense table breadth first.
  const size_t states = r->depth_.size();
  std::vector<uint32_t> fail(states, 0);
  r->longest_out_.assign(states, -1);
  std::deque<uint32_t> queue;
  for (uint32_t c = 0; c < k; ++c) {
    uint32_t& t = r->next_[c];
    if (t == kNone) t = 0;
    else {
      fail[t] = 0;
      queue.push_back(t);
    }
  }
  r->longest_out_[0] = -1;
  while (!queue.empty()) {
    uint32_t s = queue.front();
    queue.pop_front();
    // A state's own pattern is longer than any its failure chain ends with.
    r->longest_out_[s] = terminal[s] >= 0 ? terminal[s] : r->longest_out_[fail[s]];
    for (uint32_t c = 0; c < k; ++c) {
      uint32_t& t = r->next_[static_cast<size_t>(s) * k + c];
      uint32_t via_fail = r->next_[static_cast<size_t>(fail[s]) * k + c];
      if (t == kNone) {
        t = via_fail;
      } else {
        fail[t] = via_fail;
        queue.push_back(t);
      }
    }
  }
  return r;
}

std::string Redactions::redact(std::string_view text) const {
  if (empty()) return std::string(text);
  // A shared_ptr that does not own: the stream lives only in this call.
  StreamRedactor stream(std::shared_ptr<const Redactions>(std::shared_ptr<const Redactions>(), this));
  std::string out;
  out.reserve(text.size());
  stream.feed(text, out);
  stream.flush(out);
  return out;
}

bool Redactions::contains(std::string_view text) const {
  if (empty()) return false;
  uint32_t s = 0;
  for (unsigned char c : text) {
    s = step(s, c);
    if (longest_out_[s] >= 0) return true;
  }
  return false;
}

StreamRedactor::StreamRedactor(std::shared_ptr<const Redactions> redactions) : r_(std::move(redactions)) {}

void StreamRedactor::feed(std::string_view in, std::string& out) {
  if (!r_ || r_->empty()) {
    out.append(in);
    return;
  }
  const size_t start = buf_.size();
  buf_.append(in);
  const Redactions& r = *r_;
  const auto* data = reinterpret_cast<const unsigned char*>(buf_.data());
  uint32_t s = state_;
  for (size_t i = start; i < buf_.size(); ++i) {
    s = r.step(s, data[i]);
    int32_t p = r.longest_out_[s];
    if (p < 0) continue;
    const auto& pat = r.patterns_[static_cast<size_t>(p)];
    Span span{i + 1 - pat.length, i + 1, pat.secret};
    // Merge with the occurrences it overlaps (it may cover several earlier ones).
    while (!spans_.empty() && spans_.back().end > span.begin) {
      if (spans_.back().begin <= span.begin) {
        span.begin = spans_.back().begin;
        span.secret = spans_.back().secret;
      }
      spans_.pop_back();
    }
    spans_.push_back(span);
  }
  state_ = s;
  // Bytes before `boundary` cannot begin an occurrence still to come.
  size_t boundary = buf_.size() - r.depth_[s];
  // An occurrence that reaches past it is held whole (a longer one may still extend it).
  for (size_t j = spans_.size(); j-- > 0 && spans_[j].end > boundary;)
    if (spans_[j].begin < boundary) boundary = spans_[j].begin;
  release(boundary, out);
}

void StreamRedactor::flush(std::string& out) {
  release(buf_.size(), out);
  state_ = 0;
}

void StreamRedactor::release(size_t upto, std::string& out) {
  if (upto == 0) return;
  size_t pos = 0, used = 0;
  for (; used < spans_.size() && spans_[used].end <= upto; ++used) {
    const Span& sp = spans_[used];
    out.append(buf_, pos, sp.begin - pos);
    out += redaction_marker(r_->names_[sp.secret]);
    pos = sp.end;
  }
  out.append(buf_, pos, upto - pos);
  spans_.erase(spans_.begin(), spans_.begin() + static_cast<std::ptrdiff_t>(used));
  for (auto& sp : spans_) sp.begin -= upto, sp.end -= upto;
  buf_.erase(0, upto);
}

}  // namespace cela::obs
