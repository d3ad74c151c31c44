// JSON text as cela writes it: Boost.JSON's serializer, except that numbers are plain
// decimals (`1`, `0.5`, `1024`), never `1E0` or `5E-1`, which some clients mis-read.
#pragma once

#include <boost/json/value.hpp>
#include <string>

namespace cela {

std::string json_text(const boost::json::value& value);

}  // namespace cela
