// The YAML of HY-Motion's config.yml, read and written without a YAML library: block mappings and
// lists, flow [..] and {..}, plain/quoted scalars resolved as PyYAML resolves them (YAML 1.1: yes/no
// are booleans, a float needs a dot). Anchors, aliases, tags and block scalars are refused with the line.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zest {

// The values of the top-level keys `keys` of a YAML document, as a JSON object (keys absent from the
// document are absent from the result). Other top-level entries are skipped unparsed, so syntax zest
// does not read elsewhere in the file cannot fail the read. Errors name `source` and the line.
nlohmann::ordered_json read_yaml_entries(const std::string& text, const std::string& source,
                                         const std::vector<std::string>& keys);

// A JSON object as block-style YAML (keys in order, 2-space indents, lists at their key's indent), the
// style of PyYAML's safe_dump(default_flow_style=False, sort_keys=False); reads back to the same values.
std::string write_yaml(const nlohmann::ordered_json& mapping);

}  // namespace zest
