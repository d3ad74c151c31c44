#include "api/router.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace cela::api {
namespace {

bool is_capture(std::string_view segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

// "{name...}": the rest of the path, zero or more segments (last segment only).
bool is_tail_capture(std::string_view segment) {
  return is_capture(segment) && segment.size() > 5 && segment.substr(segment.size() - 4) == "...}";
}

[[noreturn]] void bad_route(std::string_view pattern, const char* why) {
  std::fprintf(stderr, "cela api: route \"%.*s\": %s\n", static_cast<int>(pattern.size()),
               pattern.data(), why);
  std::abort();
}

std::vector<std::string> split_pattern(std::string_view pattern) {
  if (pattern.empty() || pattern.front() != '/') bad_route(pattern, "must start with '/'");
  std::vector<std::string> segments;
  std::string_view rest = pattern.substr(1);
  while (!rest.empty()) {
    auto slash = rest.find('/');
    std::string_view segment = rest.substr(0, slash);
    if (segment.empty()) bad_route(pattern, "empty segment");
    if (segment.find_first_of("{}") != std::string_view::npos && !is_capture(segment)) {
      bad_route(pattern, "a capture must be a whole segment: {name}");
    }
    if (is_tail_capture(segment) && slash != std::string_view::npos)
      bad_route(pattern, "a {name...} capture must be the last segment");
    segments.emplace_back(segment);
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  return segments;
}

// Fills `params` and returns true when `route` matches `path`.
bool matches(const Route& route, const std::vector<std::string>& path,
             std::map<std::string, std::string, std::less<>>& params) {
  bool tail = !route.segments.empty() && is_tail_capture(route.segments.back());
  std::size_t fixed = route.segments.size() - (tail ? 1 : 0);
  if (tail ? path.size() < fixed : route.segments.size() != path.size()) return false;
  if (tail) {
    std::string rest;
    for (std::size_t i = fixed; i < path.size(); ++i) rest += (i == fixed ? "" : "/") + path[i];
    const std::string& want = route.segments.back();
    params[want.substr(1, want.size() - 5)] = rest;
  }
  for (std::size_t i = 0; i < fixed; ++i) {
    const std::string& want = route.segments[i];
    if (is_capture(want)) {
      if (path[i].empty()) return false;
      params[want.substr(1, want.size() - 2)] = path[i];
    } else if (want != path[i]) {
      return false;
    }
  }
  return true;
}

// True when `a` is more specific than `b`: a literal at the first differing position.
bool more_specific(const Route& a, const Route& b) {
  for (std::size_t i = 0; i < a.segments.size() && i < b.segments.size(); ++i) {
    bool a_literal = !is_capture(a.segments[i]);
    bool b_literal = !is_capture(b.segments[i]);
    if (a_literal != b_literal) return a_literal;
  }
  return false;
}

}  // namespace

void Router::add(http::verb method, std::string_view pattern, RouteDoc doc, Handler handler,
                 RouteOptions options) {
  std::vector<std::string> segments = split_pattern(pattern);
  for (const Route& r : routes_) {
    if (r.method == method && r.segments == segments) bad_route(pattern, "registered twice");
  }
  routes_.push_back(Route{method, std::string(pattern), std::move(handler), options, std::move(doc),
                          std::move(segments)});
}

RouteMatch Router::match(http::verb method, const std::vector<std::string>& segments) const {
  RouteMatch result;
  std::vector<http::verb> other_methods;
  for (const Route& route : routes_) {
    std::map<std::string, std::string, std::less<>> params;
    if (!matches(route, segments, params)) continue;
    if (route.method != method) {
      // Allow lists each method once, in registration order.
      if (std::find(other_methods.begin(), other_methods.end(), route.method) ==
          other_methods.end()) {
        other_methods.push_back(route.method);
        if (!result.allow.empty()) result.allow += ", ";
        result.allow += std::string(http::to_string(route.method));
      }
      result.path_known = true;
      continue;
    }
    if (!result.route || more_specific(route, *result.route)) {
      result.route = &route;
      result.params = std::move(params);
    }
  }
  return result;
}

}  // namespace cela::api
