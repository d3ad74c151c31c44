// The one strict JSON reader of cela: request bodies (api/), the daemon config
// (session/config.cc) and template manifests (rootfs/template.cc). Errors name the
// offending field by its dotted path and carry ErrorCode::invalid_argument (the API
// answers them as invalid_request).
//
//   auto body = parse_json_object(req.body);
//   if (!body) return res.error(body.error());
//   JsonFields fields(*body);
//   if (auto ok = fields.only({"template", "limits"}); !ok) return res.error(ok.error());
//   auto limits = fields.object("limits");          // Result<optional<JsonFields>>
//   auto memory = (*limits)->integer("memory_mb");  // "field `limits.memory_mb` must be an
//   integer"
#pragma once

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"

namespace cela {

// One JSON object, parsed strictly (RFC 8259: no comments, no trailing commas, valid
// UTF-8, nesting depth <= 32). invalid_argument on malformed JSON or a non-object;
// `what` names the text in the message ("JSON body", "config /etc/cela.json").
// A repeated key keeps its last value (Boost.JSON's behaviour).
Result<boost::json::object> parse_json_object(std::string_view text, std::string_view what = "JSON body");

// Typed access to the fields of one JSON object. Absent and null fields read as
// std::nullopt; wrong types are invalid_argument naming the field by its dotted path.
// Refers to `object` (which must outlive it); cheap to copy.
class JsonFields {
 public:
  explicit JsonFields(const boost::json::object& object, std::string path = {});

  Result<std::optional<std::string>> string(std::string_view key) const;
  Result<std::optional<double>> number(std::string_view key) const;
  // Integral numbers only (512 and 512.0 pass; 512.5 and 2^63 do not).
  Result<std::optional<std::int64_t>> integer(std::string_view key) const;
  Result<std::optional<bool>> boolean(std::string_view key) const;
  Result<std::optional<JsonFields>> object(std::string_view key) const;
  // nullptr when absent or null.
  Result<const boost::json::array*> array(std::string_view key) const;
  Result<std::optional<std::vector<std::string>>> string_array(std::string_view key) const;
  Result<std::optional<std::map<std::string, std::string>>> string_map(
      std::string_view key) const;

  // The same, with absence an error ("field `argv` is required").
  Result<std::string> require_string(std::string_view key) const;
  Result<std::int64_t> require_integer(std::string_view key) const;
  Result<JsonFields> require_object(std::string_view key) const;

  // invalid_argument naming the first field not in `known` ("unknown field `limits.memroy_mb`").
  Result<void> only(std::initializer_list<std::string_view> known) const;

  // "field `limits.memory_mb` <what>", for range and format checks by callers.
  Error invalid(std::string_view key, std::string_view what) const;
  // "limits.memory_mb"
  std::string path_of(std::string_view key) const;
  const boost::json::object& raw() const { return *object_; }

 private:
  // nullptr when absent or null.
  const boost::json::value* find(std::string_view key) const;

  const boost::json::object* object_;
  std::string path_;
};

}  // namespace cela
