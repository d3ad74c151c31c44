#include "obs/metrics.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace cela::obs {

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string format_sample(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
    return buf;
  }
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

namespace {

void write_labels(std::string& out, const std::vector<std::string>& names, const Labels& values,
                  std::string_view extra_name = {}, std::string_view extra_value = {}) {
  if (names.empty() && extra_name.empty()) return;
  out += '{';
  bool first = true;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (!first) out += ',';
    first = false;
    out += names[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  if (!extra_name.empty()) {
    if (!first) out += ',';
    out += extra_name;
    out += "=\"";
    out += extra_value;
    out += '"';
  }
  out += '}';
}

std::string_view type_name(MetricType t) {
  switch (t) {
    case MetricType::counter: return "counter";
    case MetricType::gauge: return "gauge";
    case MetricType::histogram: return "histogram";
  }
  return "untyped";
}

void write_header(std::string& out, std::string_view name, std::string_view help, MetricType type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type_name(type);
  out += '\n';
}

}  // namespace

Family::Family(std::string name, std::string help, MetricType type, std::vector<std::string> label_names,
               std::vector<double> buckets, size_t max_series)
    : name_(std::move(name)),
      help_(std::move(help)),
      type_(type),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)),
      max_series_(max_series < 1 ? 1 : max_series) {}

Family::Series& Family::series_locked(const Labels& given) {
  Labels labels = given;
  labels.resize(label_names_.size());
  auto it = series_.find(labels);
  if (it != series_.end()) return it->second;
  // Full: every new label set lands in the one overflow series (which may itself be
  // the series past the cap: the cap counts it too).
  if (series_.size() >= max_series_) labels.assign(label_names_.size(), std::string(kOverflowLabel));
  Series& s = series_[labels];
  if (type_ == MetricType::histogram && s.bucket.empty()) s.bucket.assign(buckets_.size(), 0);
  return s;
}

void Family::add(const Labels& labels, double v) {
  if (type_ == MetricType::counter && !(v >= 0)) return;
  std::lock_guard lock(mu_);
  series_locked(labels).value += v;
}

void Family::set(const Labels& labels, double v) {
  std::lock_guard lock(mu_);
  series_locked(labels).value = v;
}

void Family::observe(const Labels& labels, double v) {
  std::lock_guard lock(mu_);
  Series& s = series_locked(labels);
  s.value += v;
  ++s.count;
  for (size_t i = 0; i < buckets_.size(); ++i)
    if (v <= buckets_[i]) {
      ++s.bucket[i];
      break;
    }
}

double Family::value(const Labels& given) const {
  Labels labels = given;
  labels.resize(label_names_.size());
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  if (it == series_.end()) return 0;
  return type_ == MetricType::histogram ? static_cast<double>(it->second.count) : it->second.value;
}

void Family::render(std::string& out) const {
  write_header(out, name_, help_, type_);
  std::lock_guard lock(mu_);
  for (const auto& [labels, s] : series_) {
    if (type_ != MetricType::histogram) {
      out += name_;
      write_labels(out, label_names_, labels);
      out += ' ';
      out += format_sample(s.value);
      out += '\n';
      continue;
    }
    uint64_t cumulative = 0;
    for (size_t i = 0; i < buckets_.size(); ++i) {
      cumulative += s.bucket[i];
      out += name_;
      out += "_bucket";
      write_labels(out, label_names_, labels, "le", format_sample(buckets_[i]));
      out += ' ';
      out += std::to_string(cumulative);
      out += '\n';
    }
    out += name_;
    out += "_bucket";
    write_labels(out, label_names_, labels, "le", "+Inf");
    out += ' ';
    out += std::to_string(s.count);
    out += '\n';
    out += name_;
    out += "_sum";
    write_labels(out, label_names_, labels);
    out += ' ';
    out += format_sample(s.value);
    out += '\n';
    out += name_;
    out += "_count";
    write_labels(out, label_names_, labels);
    out += ' ';
    out += std::to_string(s.count);
    out += '\n';
  }
}

Family& Registry::add(std::string_view name, std::string_view help, MetricType type,
                      std::vector<std::string> label_names, std::vector<double> buckets, size_t max_series) {
  std::lock_guard lock(mu_);
  if (auto it = families_.find(name); it != families_.end()) return *it->second;
  auto family = std::make_unique<Family>(std::string(name), std::string(help), type, std::move(label_names),
                                         std::move(buckets), max_series);
  Family& ref = *family;
  families_.emplace(std::string(name), std::move(family));
  return ref;
}

Family& Registry::counter(std::string_view name, std::string_view help, std::vector<std::string> label_names,
                          size_t max_series) {
  return add(name, help, MetricType::counter, std::move(label_names), {}, max_series);
}

Family& Registry::gauge(std::string_view name, std::string_view help, std::vector<std::string> label_names,
                        size_t max_series) {
  return add(name, help, MetricType::gauge, std::move(label_names), {}, max_series);
}

Family& Registry::histogram(std::string_view name, std::string_view help, std::vector<std::string> label_names,
                            std::vector<double> buckets, size_t max_series) {
  return add(name, help, MetricType::histogram, std::move(label_names), std::move(buckets), max_series);
}

void Registry::collector(std::string_view name, std::string_view help, std::vector<std::string> label_names,
                         Collector collect) {
  std::lock_guard lock(mu_);
  collectors_[std::string(name)] = {std::string(help), std::move(label_names), std::move(collect)};
}

void Registry::remove_collector(std::string_view name) {
  std::lock_guard lock(mu_);
  if (auto it = collectors_.find(name); it != collectors_.end()) collectors_.erase(it);
}

std::string Registry::render() const {
  std::vector<const Family*> families;
  std::vector<std::pair<std::string, CollectorEntry>> collectors;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, f] : families_) families.push_back(f.get());
    for (const auto& [name, c] : collectors_) collectors.emplace_back(name, c);
  }
  std::string out;
  for (const Family* f : families) f->render(out);
  // Collectors run outside the registry's lock: they read their owner's state.
  for (const auto& [name, c] : collectors) {
    write_header(out, name, c.help, MetricType::gauge);
    for (const Collected& sample : c.collect()) {
      out += name;
      write_labels(out, c.label_names, sample.labels);
      out += ' ';
      out += format_sample(sample.value);
      out += '\n';
    }
  }
  return out;
}

Registry& metrics() {
  static Registry* registry = new Registry;  // never destroyed: threads may still count at exit
  return *registry;
}

}  // namespace cela::obs
