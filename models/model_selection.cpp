// ModelSelection: [model] TOML reader (exactly one of name / config / a pretrained folder, checked against
// the built-in configurations and the file system) and writer.
#include "models/model_selection.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "models/registry.h"

#include <algorithm>
#include <filesystem>

namespace zest {

bool ModelSelection::has_pretrained_folder() const {
  return !pretrained.empty() && std::filesystem::is_directory(pretrained);
}

namespace {

// [model] pretrained: the path must exist; a folder brings its architecture, a file needs name/config.
void check_pretrained(ConfigTable& table, const ModelSelection& c) {
  if (!table.has("pretrained")) {
    if (table.has("strict")) table.fail("strict", "applies to model.pretrained, which is not set");
    return;
  }
  if (!std::filesystem::exists(c.pretrained)) table.fail("pretrained", "not found: " + c.pretrained);
  if (c.has_pretrained_folder()) {
    for (const char* key : {"name", "config", "family"}) {
      if (table.has(key))
        table.fail(key, "not used with model.pretrained = \"" + c.pretrained +
                            "\": the folder's own config gives the architecture; remove model." + key);
    }
    return;
  }
  const bool is_safetensors = c.pretrained.size() > 12 && (c.pretrained.ends_with(".safetensors") ||
                                                          c.pretrained.ends_with(".safetensors.index.json"));
  if (!is_safetensors)
    table.fail("pretrained", "expected a folder (diffusers UNet or pipeline, HY-Motion release) or a "
                             ".safetensors / .safetensors.index.json file, got " + c.pretrained);
  if (!table.has("name") && !table.has("config"))
    table.fail("pretrained", "a .safetensors file holds no architecture: add model.name or model.config");
}

}  // namespace

ModelSelection ModelSelection::from_toml(ConfigTable& table) {
  ModelSelection c;
  c.name = table.get("name", c.name);
  c.config_path = table.get_path("config", c.config_path);
  c.family = table.get("family", c.family);
  c.pretrained = table.get_path("pretrained", c.pretrained);
  c.strict = table.get("strict", c.strict);
  table.reject_unknown_keys({{"path", "zest calls it config"},
                             {"pretrained_model_name_or_path", "zest calls it pretrained (a local folder)"},
                             {"weights", "zest calls it pretrained"}});
  check_pretrained(table, c);
  if (c.has_pretrained_folder()) return c;
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
    table.fail_table("needs name = \"<built-in configuration>\" (e.g. \"hymotion_tiny\"), config = \"<file.toml>\" "
                     "or pretrained = \"<released model folder>\"");
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
  } else if (!c.config_path.empty()) {
    t.set("config", c.config_path, "model configuration file");
    if (!c.family.empty()) t.set("family", c.family, "model family of the file");
  }
  if (c.pretrained.empty()) return;
  t.set("pretrained", c.pretrained, "released weights to start from (a folder's config gives the architecture)");
  t.set("strict", c.strict, "every tensor must match the model");
}

}  // namespace zest
