// ModelSelection: [model] TOML reader (exactly one of name / config, checked against the built-in
// configurations and the file system) and writer.
#include "models/model_selection.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "models/registry.h"

#include <algorithm>
#include <filesystem>

namespace zest {

ModelSelection ModelSelection::from_toml(ConfigTable& table) {
  ModelSelection c;
  c.name = table.get("name", c.name);
  c.config_path = table.get_path("config", c.config_path);
  c.family = table.get("family", c.family);
  table.reject_unknown_keys({{"path", "zest calls it config"}});
  if (table.has("family") && table.has("name"))
    table.fail("family", "model.family goes with model.config; a built-in configuration knows its family");
  if (table.has("family")) {
    std::vector<std::string> families;
    for (const ModelFamily& f : model_families()) families.push_back(f.name);
    if (std::find(families.begin(), families.end(), c.family) == families.end())
      table.fail("family", "unknown model family \"" + c.family + "\" (known: hymotion, unet)");
  }

  if (table.has("name") && table.has("config"))
    table.fail("config", "give either model.name (a built-in configuration) or model.config (a file), not both");
  if (!table.has("name") && !table.has("config"))
    table.fail_table("needs name = \"<built-in configuration>\" (e.g. \"hymotion_tiny\") or config = \"<file.toml>\"");
  if (c.is_builtin()) {
    std::vector<std::string> names;
    for (const BuiltinModelConfig& builtin : builtin_model_configs()) names.push_back(builtin.name);
    if (std::find(names.begin(), names.end(), c.name) == names.end()) {
      const std::string guess = closest_match(c.name, names);
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      table.fail("name", "unknown built-in model configuration \"" + c.name + "\"" +
                             (guess.empty() ? "" : " (did you mean \"" + guess + "\"?)") + "; built-ins: " + list);
    }
  } else if (!std::filesystem::is_regular_file(c.config_path)) {
    table.fail("config", "model configuration file not found: " + c.config_path);
  }
  return c;
}

void to_toml(const ModelSelection& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("model", "the model to train");
  if (c.is_builtin()) {
    t.set("name", c.name, "built-in configuration (zest models list)");
  } else {
    t.set("config", c.config_path, "model configuration file");
    if (!c.family.empty()) t.set("family", c.family, "model family of the file");
  }
}

}  // namespace zest
