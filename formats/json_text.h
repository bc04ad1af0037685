// The one reader of JSON text from files written by strangers (configs, tokenizer files, manifests,
// index files, dataset listings): the file is opened only when it is a regular file and read only up to a
// size cap of its kind, the document is refused past the nesting limit of formats/input_limits.h before it
// is built, and errors name the source, the byte offset and (for a number out of range) the key, never
// the parser. Values are then read with typed access (formats/json_field.h); a message that shows a value
// quotes json_excerpt(), a short escaped excerpt, never dump() of hostile input.
#pragma once

#include "formats/input_limits.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace zest {

nlohmann::json parse_json(const std::string& text, const std::string& source, int max_depth = kMaxJsonDepth);
nlohmann::ordered_json parse_ordered_json(const std::string& text, const std::string& source,
                                          int max_depth = kMaxJsonDepth);

// The JSON document in the regular file `path` of at most `max_bytes` (what: "scheduler config", for the
// messages); key order kept. A FIFO, a device, a folder, a larger file, bad JSON: one message naming the file.
nlohmann::ordered_json read_json_file(const std::string& path, const std::string& what,
                                      uint64_t max_bytes = kMaxConfigJsonBytes);

// At most `max_chars` characters of `value` as JSON, escaped for a terminal (core/untrusted_file.h's
// printable), without serialising more of a large or deep value than is shown.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 60);
std::string json_excerpt(const nlohmann::ordered_json& value, size_t max_chars = 60);

}  // namespace zest
