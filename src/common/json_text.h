// JSON text as cela writes it: Boost.JSON's serializer, except that numbers are plain
// decimals (`1`, `0.5`, `1024`), never `1E0` or `5E-1`, which some clients mis-read,
// and the text is always UTF-8: a string that is not is written with U+FFFD in place of
// each bad byte (callers put the exact bytes in a base64 sibling field).
#pragma once

#include <boost/json/value.hpp>
#include <string>

namespace cela {

std::string json_text(const boost::json::value& value);

}  // namespace cela
