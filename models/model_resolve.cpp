// [model] resolution (see model_resolve.h).
#include "models/model_resolve.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "models/model_memory.h"
#include "models/pretrained_source.h"

#include <filesystem>

namespace zest {
namespace {

const ModelFamily& family_for_file(const ModelSelection& selection, const std::string& path) {
  if (!selection.family.empty()) return model_family(selection.family);
  const std::string stem = std::filesystem::path(path).stem().string();
  // <family>_*.toml (or <family>.toml): the whole name up to '_', so that no family claims another's files.
  for (const auto& family : model_families()) {
    if (stem == family.name || stem.rfind(family.name + "_", 0) == 0) return family;
  }
  ZEST_FAIL("cannot tell the model family of ", path, ": set model.family (e.g. \"hymotion\" or \"unet\") "
            "or name the file <family>_*.toml");
}

}  // namespace

std::string read_model_config_text(const std::string& path) {
  return read_text_file(path, "model configuration", 16ull << 20);
}

ResolvedModel resolve_model(const ModelSelection& selection) {
  if (selection.has_pretrained_folder()) return resolve_pretrained_folder(selection.pretrained);
  ResolvedModel model;
  model.pretrained = selection.pretrained;  // a weights file with the model's own names, or none
  if (selection.is_builtin()) {
    const BuiltinModelConfig& builtin = builtin_model_config(selection.name);
    model.family = &model_family(builtin.family);
    model.name = builtin.name;
    model.toml_text = builtin.toml_text;
    model.source = "built-in model configuration " + builtin.name;
  } else {
    const std::filesystem::path path = selection.config_path;
    model.family = &family_for_file(selection, path.string());
    model.name = path.stem().string();
    model.toml_text = read_model_config_text(path.string());
    model.source = path.string();
  }
  model.description = model.name + " (" + model.family->name + ")";
  return model;
}

ConfigTable model_config_table(const ResolvedModel& model) {
  return ConfigTable::parse_string(model.toml_text, model.source);
}

std::shared_ptr<UnitModule> build_model(const ResolvedModel& model) {
  auto counted = model_config_table(model);
  check_model_fits_host(*model.family, counted);  // before the first weight is allocated
  auto table = model_config_table(model);
  return model.family->build(table);
}

int64_t count_model_parameters(const ResolvedModel& model) {
  auto table = model_config_table(model);
  return model.family->count_parameters(table);
}

}  // namespace zest
