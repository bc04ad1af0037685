// Model configurations between JSON and TOML. The reference formats (diffusers' config.json, the network
// arguments in HY-Motion's config.yml) are JSON-shaped; zest's model configurations are TOML with the same
// field names. A JSON null stands for Python's None, which a TOML configuration says by leaving the key out.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace zest {

// TOML text of a JSON object: one `key = value` line per non-null field in order, nested objects as
// inline tables. `header` becomes comment lines at the top. A null inside a list is an error naming
// `source` and the field.
std::string json_to_toml(const nlohmann::ordered_json& object, const std::string& header, const std::string& source);

// The fields of a TOML model configuration as a JSON object (integers stay integers, floats floats);
// errors name `source`.
nlohmann::ordered_json toml_to_json(const std::string& toml_text, const std::string& source);

}  // namespace zest
