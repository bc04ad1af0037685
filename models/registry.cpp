// The model registry (see registry.h): the built-in families listed explicitly, one line each, the families
// registered at run time after them, and the built-in configurations embedded from configs/models/*.toml.
#include "models/registry.h"

#include "core/check.h"
#include "models/builtin_configs.h"
#include "models/hymotion/hymotion.h"
#include "models/unet/unet.h"

#include <algorithm>
#include <set>
#include <utility>

namespace zest {
namespace {

// A folder format's name is what `zest merge --format` and a checkpoint's model_source record say, so it
// names one format of one family.
void check_folder_format(const ModelFamily& family, const FolderFormat& format, std::set<std::string>& names) {
  const bool complete = !format.name.empty() && !format.config_name.empty() && format.find_layout &&
                        format.read_config && format.write_config && format.export_weights;
  ZEST_CHECK(complete, "folder format '", format.name, "' of model family '", family.name,
             "' is registered incompletely");
  ZEST_CHECK(names.insert(format.name).second, "folder format '", format.name, "' of model family '", family.name,
             "' is registered twice");
}

bool is_well_formed_name(const std::string& name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
  });
}

// The checks every family passes before it is listed, built-in or registered later: one error naming the
// family and what is wrong.
void check_family(const ModelFamily& family, const std::deque<ModelFamily>& registered) {
  ZEST_CHECK(is_well_formed_name(family.name), "model family '", family.name, "': a family's name is lowercase "
             "letters and digits (it starts its configurations' names, <family>_*.toml)");
  const std::pair<const char*, bool> required[] = {
      {"build", bool(family.build)},
      {"count_parameters", bool(family.count_parameters)},
      {"forward", bool(family.forward)},
      {"training_loss", bool(family.training_loss)},
      {"make_training_loss", bool(family.make_training_loss)},
      {"dataset_features", bool(family.dataset_features)},
  };
  for (const auto& [member, is_set] : required)
    ZEST_CHECK(is_set, "model family '", family.name, "' is registered incompletely: ", member, " is not set");
  std::set<std::string> format_names = {kSafetensorsFormat};
  for (const ModelFamily& other : registered) {
    ZEST_CHECK(other.name != family.name, "model family '", family.name, "' is registered twice");
    for (const FolderFormat& format : other.folder_formats) format_names.insert(format.name);
  }
  for (const FolderFormat& format : family.folder_formats) check_folder_format(family, format, format_names);
}

std::deque<ModelFamily> make_families() {
  // Adding a model family: one folder under models/ and one line here (or register_model_family).
  std::vector<ModelFamily> builtins{
      hymotion::family(),
      unet::family(),
  };
  std::deque<ModelFamily> families;
  for (ModelFamily& family : builtins) {
    check_family(family, families);
    families.push_back(std::move(family));
  }
  return families;
}

// The one list; model_families() hands it out read-only, register_model_family appends to it.
std::deque<ModelFamily>& registered_families() {
  static std::deque<ModelFamily> families = make_families();
  return families;
}

std::vector<BuiltinModelConfig> make_builtin_configs() {
  std::vector<BuiltinModelConfig> configs;
  for (const detail::EmbeddedConfigFile& file : detail::embedded_model_config_files()) {
    const std::string file_name(file.file_name);
    const std::string name = file_name.substr(0, file_name.size() - std::string(".toml").size());
    // The family is the file name up to the first '_': hymotion_1b → hymotion.
    const std::string family = name.substr(0, name.find('_'));
    ZEST_CHECK(is_model_family(family), "built-in configuration configs/models/", file_name,
               ": its name must start with a model family and '_' (known families: ", model_family_names(), ")");
    configs.push_back({name, family, std::string(file.text)});
  }
  return configs;
}

}  // namespace

const std::deque<ModelFamily>& model_families() { return registered_families(); }

const ModelFamily& register_model_family(ModelFamily family) {
  std::deque<ModelFamily>& families = registered_families();
  check_family(family, families);
  families.push_back(std::move(family));
  return families.back();
}

bool is_model_family(const std::string& name) {
  const auto& families = model_families();
  return std::any_of(families.begin(), families.end(), [&](const ModelFamily& f) { return f.name == name; });
}

std::string model_family_names() {
  std::string names;
  for (const ModelFamily& family : model_families()) names += (names.empty() ? "" : ", ") + family.name;
  return names;
}

const ModelFamily& model_family(const std::string& name) {
  for (const ModelFamily& family : model_families()) {
    if (family.name == name) return family;
  }
  ZEST_FAIL("unknown model family '", name, "' (known: ", model_family_names(), ")");
}

OwnedFolderFormat find_folder_format(const std::string& name) {
  for (const ModelFamily& family : model_families()) {
    for (const FolderFormat& format : family.folder_formats) {
      if (format.name == name) return {&family, &format};
    }
  }
  return {};
}

std::vector<OwnedFolderFormat> folder_formats_by_name() {
  std::vector<OwnedFolderFormat> formats;
  for (const ModelFamily& family : model_families()) {
    for (const FolderFormat& format : family.folder_formats) formats.push_back({&family, &format});
  }
  std::sort(formats.begin(), formats.end(),
            [](const OwnedFolderFormat& a, const OwnedFolderFormat& b) { return a.format->name < b.format->name; });
  return formats;
}

const std::vector<BuiltinModelConfig>& builtin_model_configs() {
  static const std::vector<BuiltinModelConfig> configs = make_builtin_configs();
  return configs;
}

const BuiltinModelConfig& builtin_model_config(const std::string& name) {
  std::string known;
  const BuiltinModelConfig* closest = nullptr;
  size_t closest_distance = 0;
  for (const BuiltinModelConfig& config : builtin_model_configs()) {
    if (config.name == name) return config;
    known += (known.empty() ? "" : ", ") + config.name;
    const size_t distance = edit_distance(name, config.name);
    if (!closest || distance < closest_distance) {
      closest = &config;
      closest_distance = distance;
    }
  }
  const std::string hint =
      closest && closest_distance <= 3 ? "; did you mean '" + closest->name + "'?" : "";
  ZEST_FAIL("unknown built-in model configuration '", name, "' (known: ", known, ")", hint);
}

}  // namespace zest
