// ModelSelection: [model] TOML reader (exactly one of name / config / a pretrained folder, checked against
// the built-in configurations and the file system) and writer.
#include "models/model_selection.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"
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

const FieldTable<ModelSelection>& model_fields() {
  static const FieldTable<ModelSelection> table = [] {
    using C = ModelSelection;
    FieldTable<C> t("model", "the model to train",
                    {{"path", "zest calls it config"},
                     {"pretrained_model_name_or_path", "zest calls it pretrained (a local folder)"},
                     {"weights", "zest calls it pretrained"}});
    const auto has_file = [](const C& c) { return !c.is_builtin() && !c.config_path.empty(); };
    const auto has_pretrained = [](const C& c) { return !c.pretrained.empty(); };
    t.text("name", &C::name, "built-in configuration (zest models list)")
        .written_when([](const C& c) { return c.is_builtin(); })
        .default_text("—")
        .reference("built-in model configuration (`configs/models/<name>.toml`, e.g. `hymotion_tiny`, `unet_sd15`); "
                   "exactly one of name / config");
    t.path("config", &C::config_path, "model configuration file")
        .written_when(has_file)
        .default_text("—")
        .reference("model configuration file (keys are the reference model's constructor arguments)");
    t.text("family", &C::family, "model family of the file")
        .written_when([has_file](const C& c) { return has_file(c) && !c.family.empty(); })
        .type("hymotion | unet")
        .default_text("from the file name (`<family>_*.toml`)")
        .reference("model family of `model.config`; only with `config` (a built-in configuration knows its family)");
    t.path("pretrained", &C::pretrained, "released weights to start from (a folder's config gives the architecture)")
        .written_when(has_pretrained)
        .default_text("—")
        .reference("released weights to start from (below); a folder's own config gives the architecture, so it "
                   "takes neither name nor config");
    t.boolean("strict", &C::strict, "every tensor must match the model")
        .written_when(has_pretrained)
        .reference("every model tensor must be in the weights with its shape and the weights hold nothing else; "
                   "false: load the matching tensors, report the rest (only with pretrained)");
    // Exactly one of name / config / a pretrained folder; the name must be a built-in configuration and the
    // files must exist.
    t.rules([](ConfigTable& table, C& c) {
      check_pretrained(table, c);
      if (c.has_pretrained_folder()) return;
      if (table.has("family") && table.has("name"))
        table.fail("family", "model.family goes with model.config; a built-in configuration knows its family");
      if (table.has("family")) {
        if (!is_model_family(c.family))
          table.fail("family", "unknown model family \"" + c.family + "\" (known: " + model_family_names() + ")");
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
    });
    return t;
  }();
  return table;
}

ModelSelection ModelSelection::from_toml(ConfigTable& table) { return model_fields().read(table); }

void to_toml(const ModelSelection& c, ConfigWriter& out) { model_fields().write(c, out); }

}  // namespace zest
