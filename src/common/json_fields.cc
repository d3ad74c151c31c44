#include "common/json_fields.h"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <cmath>

namespace cela {

Result<boost::json::object> parse_json_object(std::string_view body, std::string_view what) {
  boost::json::parse_options options;  // defaults are strict RFC 8259
  options.max_depth = 32;
  boost::system::error_code ec;
  boost::json::value value = boost::json::parse(body, ec, {}, options);
  if (ec) return fail(ErrorCode::invalid_argument, "malformed " + std::string(what) + ": " + ec.message());
  if (!value.is_object()) return fail(ErrorCode::invalid_argument, std::string(what) + " must be an object");
  return std::move(value.as_object());
}

JsonFields::JsonFields(const boost::json::object& object, std::string path)
    : object_(&object), path_(std::move(path)) {}

std::string JsonFields::path_of(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  return path_ + "." + std::string(key);
}

Error JsonFields::invalid(std::string_view key, std::string_view what) const {
  return Error{ErrorCode::invalid_argument, 0, "field `" + path_of(key) + "` " + std::string(what)};
}

const boost::json::value* JsonFields::find(std::string_view key) const {
  auto it = object_->find(key);
  if (it == object_->end() || it->value().is_null()) return nullptr;
  return &it->value();
}

Result<std::optional<std::string>> JsonFields::string(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return std::optional<std::string>{};
  if (!v->is_string()) return std::unexpected(invalid(key, "must be a string"));
  return std::optional<std::string>{std::string(v->as_string())};
}

Result<std::optional<double>> JsonFields::number(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return std::optional<double>{};
  if (!v->is_number()) return std::unexpected(invalid(key, "must be a number"));
  return std::optional<double>{v->to_number<double>()};
}

Result<std::optional<std::int64_t>> JsonFields::integer(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return std::optional<std::int64_t>{};
  if (v->is_int64()) return std::optional<std::int64_t>{v->get_int64()};
  // Numbers past INT64_MAX parse as uint64 (or double): integers, but out of range.
  if (v->is_uint64()) return std::unexpected(invalid(key, "is out of range"));
  if (!v->is_double() || std::trunc(v->get_double()) != v->get_double()) {
    return std::unexpected(invalid(key, "must be an integer"));
  }
  double d = v->get_double();
  // -2^63 is representable, 2^63 is not.
  if (d < -9223372036854775808.0 || d >= 9223372036854775808.0) {
    return std::unexpected(invalid(key, "is out of range"));
  }
  return std::optional<std::int64_t>{static_cast<std::int64_t>(d)};
}

Result<std::optional<bool>> JsonFields::boolean(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return std::optional<bool>{};
  if (!v->is_bool()) return std::unexpected(invalid(key, "must be true or false"));
  return std::optional<bool>{v->get_bool()};
}

Result<std::optional<JsonFields>> JsonFields::object(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return std::optional<JsonFields>{};
  if (!v->is_object()) return std::unexpected(invalid(key, "must be an object"));
  return std::optional<JsonFields>{JsonFields(v->get_object(), path_of(key))};
}

Result<const boost::json::array*> JsonFields::array(std::string_view key) const {
  const auto* v = find(key);
  if (!v) return nullptr;
  if (!v->is_array()) return std::unexpected(invalid(key, "must be an array"));
  return &v->get_array();
}

Result<std::optional<std::vector<std::string>>> JsonFields::string_array(
    std::string_view key) const {
  auto arr = array(key);
  if (!arr) return std::unexpected(arr.error());
  if (!*arr) return std::optional<std::vector<std::string>>{};
  std::vector<std::string> out;
  out.reserve((*arr)->size());
  for (std::size_t i = 0; i < (*arr)->size(); ++i) {
    const auto& item = (**arr)[i];
    if (!item.is_string()) {
      return std::unexpected(
          invalid(std::string(key) + "[" + std::to_string(i) + "]", "must be a string"));
    }
    out.emplace_back(item.get_string());
  }
  return std::optional<std::vector<std::string>>{std::move(out)};
}

Result<std::optional<std::map<std::string, std::string>>> JsonFields::string_map(
    std::string_view key) const {
  auto obj = object(key);
  if (!obj) return std::unexpected(obj.error());
  if (!*obj) return std::optional<std::map<std::string, std::string>>{};
  std::map<std::string, std::string> out;
  for (const auto& item : (*obj)->raw()) {
    if (!item.value().is_string()) {
      return std::unexpected((*obj)->invalid(item.key(), "must be a string"));
    }
    out[std::string(item.key())] = std::string(item.value().get_string());
  }
  return std::optional<std::map<std::string, std::string>>{std::move(out)};
}

Result<std::string> JsonFields::require_string(std::string_view key) const {
  auto value = string(key);
  if (!value) return std::unexpected(value.error());
  if (!*value) return std::unexpected(invalid(key, "is required"));
  return std::move(**value);
}

Result<std::int64_t> JsonFields::require_integer(std::string_view key) const {
  auto value = integer(key);
  if (!value) return std::unexpected(value.error());
  if (!*value) return std::unexpected(invalid(key, "is required"));
  return **value;
}

Result<JsonFields> JsonFields::require_object(std::string_view key) const {
  auto value = object(key);
  if (!value) return std::unexpected(value.error());
  if (!*value) return std::unexpected(invalid(key, "is required"));
  return **value;
}

Result<void> JsonFields::only(std::initializer_list<std::string_view> known) const {
  for (const auto& item : *object_) {
    bool found = false;
    for (std::string_view k : known) found = found || k == item.key();
    if (!found) {
      return std::unexpected(Error{ErrorCode::invalid_argument, 0, "unknown field `" + path_of(item.key()) + "`"});
    }
  }
  return {};
}

}  // namespace cela
