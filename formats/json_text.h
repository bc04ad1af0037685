// JSON text from files written by strangers, parsed with the nesting limit of formats/input_limits.h:
// deeper documents are refused before they are built, and errors name the source and the byte offset,
// never the parser.
#pragma once

#include "formats/input_limits.h"

#include <nlohmann/json.hpp>

#include <string>

namespace zest {

nlohmann::json parse_json(const std::string& text, const std::string& source, int max_depth = kMaxJsonDepth);
nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& source,
                                          int max_depth = kMaxJsonDepth);

}  // namespace zest
