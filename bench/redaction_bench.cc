// Redaction throughput (obs/redact): a 100 MiB output stream with 50 granted secrets
// (each with its ~15 encoded forms), fed in 64 KiB chunks as the output pipeline does,
// against a plain copy of the same chunks. bench/redaction.py runs it and prints MiB/s
// and the ratio.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "obs/redact.h"

namespace {

constexpr size_t kStream = 100u << 20, kChunk = 64u << 10;

std::string random_text(std::mt19937_64& rng, size_t n) {
  static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789 ,.:;-_/+=\n";
  std::uniform_int_distribution<size_t> pick(0, sizeof alphabet - 2);
  std::string s(n, ' ');
  for (auto& c : s) c = alphabet[pick(rng)];
  return s;
}

struct Fixture {
  std::vector<cela::obs::SecretValue> secrets;
  std::string stream;
  Fixture() {
    std::mt19937_64 rng(7);
    for (int i = 0; i < 50; ++i) secrets.push_back({"S" + std::to_string(i), "tok_" + random_text(rng, 28)});
    stream = random_text(rng, kStream);
    // A secret (or one of its forms) every 64 KiB or so.
    std::uniform_int_distribution<size_t> at(0, kStream - 128);
    for (int i = 0; i < 1600; ++i) {
      const auto& s = secrets[static_cast<size_t>(i) % secrets.size()];
      auto forms = cela::obs::redaction_forms(s.value);
      const auto& f = forms[static_cast<size_t>(i) % forms.size()];
      stream.replace(at(rng), f.size(), f);
    }
  }
};

const Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_PlainCopy(benchmark::State& state) {
  const auto& f = fixture();
  std::string out;
  out.reserve(kChunk * 2);
  for (auto _ : state) {
    for (size_t p = 0; p < f.stream.size(); p += kChunk) {
      out.clear();
      out.append(f.stream, p, kChunk);
      benchmark::DoNotOptimize(out.data());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(f.stream.size()));
}

void BM_Redact50Secrets(benchmark::State& state) {
  const auto& f = fixture();
  auto r = cela::obs::Redactions::build(f.secrets);
  state.counters["patterns"] = static_cast<double>(r->pattern_count());
  std::string out;
  out.reserve(kChunk * 2);
  size_t markers = 0;
  for (auto _ : state) {
    cela::obs::StreamRedactor s(r);
    for (size_t p = 0; p < f.stream.size(); p += kChunk) {
      out.clear();
      s.feed(std::string_view(f.stream).substr(p, kChunk), out);
      markers += out.find("[REDACTED:") != std::string::npos;
      benchmark::DoNotOptimize(out.data());
    }
    out.clear();
    s.flush(out);
  }
  benchmark::DoNotOptimize(markers);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(f.stream.size()));
}

BENCHMARK(BM_PlainCopy)->Unit(benchmark::kMillisecond)->MinTime(1.0);
BENCHMARK(BM_Redact50Secrets)->Unit(benchmark::kMillisecond)->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
