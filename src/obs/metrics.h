// Metrics: counters, gauges and histograms with labels, rendered as the Prometheus
// text exposition format (version 0.0.4) for GET /metrics.
//
// - One process-wide Registry (obs::metrics()); families are registered once, by name,
//   and looked up again by the same call (the catalog in obs/catalog.h names them).
// - Label cardinality is bounded per family (`max_series`, 64 by default): once a family
//   holds that many label sets, new ones are counted under the value "_other" for every
//   label, so a tenant flood can never grow the exposition without bound. No family has
//   a per-session label.
// - Thread-safe: a family's series sit behind its own mutex (increments take it for a
//   map lookup and an add); render() takes each family's mutex in turn.
// - Collectors (gauges computed at scrape time, e.g. sessions by state) are functions
//   the owner registers; they run on the scraping thread and must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace cela::obs {

using Labels = std::vector<std::string>;  // values, in the family's label order

enum class MetricType { counter, gauge, histogram };

class Family {
 public:
  Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
         std::vector<double> buckets, size_t max_series);

  // Counter: adds `v` (>= 0). Gauge: adds `v` (any sign).
  void add(const Labels& labels, double v = 1);
  // Gauge only.
  void set(const Labels& labels, double v);
  // Histogram only.
  void observe(const Labels& labels, double v);

  // The value of one series (tests, the per-session view); 0 when absent. Histograms:
  // the observation count.
  double value(const Labels& labels) const;

  const std::string& name() const { return name_; }
  void render(std::string& out) const;

 private:
  struct Series {
    double value = 0;              // counter / gauge; histogram: sum
    uint64_t count = 0;            // histogram
    std::vector<uint64_t> bucket;  // histogram: per upper bound, not cumulative
  };
  Series& series_locked(const Labels& labels);

  const std::string name_, help_;
  const MetricType type_;
  const std::vector<std::string> label_names_;
  const std::vector<double> buckets_;
  const size_t max_series_;
  mutable std::mutex mu_;
  std::map<Labels, Series> series_;
};

// A gauge family whose series are computed at scrape time.
struct Collected {
  Labels labels;
  double value = 0;
};
using Collector = std::function<std::vector<Collected>()>;

class Registry {
 public:
  // Registers the family, or returns the one already registered under `name` (same
  // type and labels: a mismatch is a programming error and aborts).
  Family& counter(std::string_view name, std::string_view help, std::vector<std::string> label_names = {},
                  size_t max_series = 64);
  Family& gauge(std::string_view name, std::string_view help, std::vector<std::string> label_names = {},
                size_t max_series = 64);
  Family& histogram(std::string_view name, std::string_view help, std::vector<std::string> label_names,
                    std::vector<double> buckets, size_t max_series = 64);
  // A scrape-time gauge family; `collect` replaces an earlier one of the same name.
  void collector(std::string_view name, std::string_view help, std::vector<std::string> label_names,
                 Collector collect);
  void remove_collector(std::string_view name);

  std::string render() const;

 private:
  Family& add(std::string_view name, std::string_view help, MetricType type, std::vector<std::string> label_names,
              std::vector<double> buckets, size_t max_series);
  struct CollectorEntry {
    std::string help;
    std::vector<std::string> label_names;
    Collector collect;
  };
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_;
  std::map<std::string, CollectorEntry, std::less<>> collectors_;
};

Registry& metrics();

// Prometheus text escaping of a label value (backslash, double quote, newline).
std::string escape_label_value(std::string_view value);
// A sample value as Prometheus writes it: integers plain, +Inf/-Inf/NaN by name.
std::string format_sample(double value);

// The label value that replaces every label once a family is full.
inline constexpr std::string_view kOverflowLabel = "_other";

}  // namespace cela::obs
