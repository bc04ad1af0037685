// Recognising a pretrained path and reading a folder's architecture (see pretrained_source.h); the folder
// formats themselves belong to their families.
#include "models/pretrained_source.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/config_json.h"

#include <filesystem>

namespace zest {
namespace {

namespace fs = std::filesystem;

// "a, b or c": what every family's folder formats look for, by format name.
std::string expected_folder_files() {
  const std::vector<OwnedFolderFormat> formats = folder_formats_by_name();
  std::string text;
  for (size_t i = 0; i < formats.size(); ++i) {
    const char* separator = i == 0 ? "" : i + 1 == formats.size() ? " or " : ", ";
    text += separator + formats[i].format->expected_files;
  }
  return text;
}

OwnedFolderFormat folder_format_of(const PretrainedLayout& layout) {
  const OwnedFolderFormat owned = find_folder_format(layout.format);
  ZEST_CHECK(owned.format != nullptr, "no model family reads folder format '", layout.format, "'");
  return owned;
}

ResolvedModel resolved_from_folder(const PretrainedLayout& layout, const std::string& path) {
  const OwnedFolderFormat owned = folder_format_of(layout);
  ResolvedModel model;
  model.pretrained = path;
  const fs::path given = fs::path(path).lexically_normal();
  model.name = given.has_filename() ? given.filename().string() : given.parent_path().filename().string();
  model.source = layout.config_file + " (as a zest model configuration)";
  FolderConfig read = owned.format->read_config(read_model_config_text(layout.config_file), layout.config_file);
  model.notes = std::move(read.notes);
  model.family = owned.family;
  const std::string header = "architecture of " + layout.config_file + " (" + owned.format->config_fields + ")";
  model.toml_text = json_to_toml(read.architecture, header, layout.config_file);
  model.description = model.name + " (" + model.family->name + ", pretrained)";
  return model;
}

}  // namespace

PretrainedLayout find_pretrained_layout(const std::string& path) {
  const fs::path p(path);
  ZEST_CHECK(fs::exists(p), "pretrained weights not found: ", path);
  if (!fs::is_directory(p)) {
    require_regular_file(path, "pretrained weights");  // a FIFO or a link to a device would never end
    const bool ok = path.ends_with(".safetensors") || path.ends_with(".safetensors.index.json");
    ZEST_CHECK(ok, path, ": expected a .safetensors or .safetensors.index.json file, or a model folder");
    return {kSafetensorsFormat, "", "", path};
  }
  for (const ModelFamily& family : model_families()) {
    for (const FolderFormat& format : family.folder_formats) {
      if (std::optional<PretrainedLayout> layout = format.find_layout(p)) return *layout;
    }
  }
  ZEST_FAIL(path, ": not a model folder zest knows: expected ", expected_folder_files(), "; found: ",
            folder_listing(p));
}

ResolvedModel resolve_pretrained_folder(const std::string& path) {
  const PretrainedLayout layout = find_pretrained_layout(path);
  ZEST_CHECK(layout.format != kSafetensorsFormat, path, " is not a folder");
  return resolved_from_folder(layout, path);
}

nlohmann::json model_source_record(const ResolvedModel& model) {
  ZEST_CHECK(model.family != nullptr, "model_source_record: unresolved model");
  nlohmann::json record = {{"family", model.family->name}, {"format", "zest"}};
  if (model.pretrained.empty()) return record;
  const PretrainedLayout layout = find_pretrained_layout(model.pretrained);
  if (layout.format == kSafetensorsFormat) return record;
  record["format"] = layout.format;
  record["config_text"] = read_model_config_text(layout.config_file);
  const OwnedFolderFormat owned = folder_format_of(layout);
  if (owned.format->add_source_record) owned.format->add_source_record(layout, record);
  return record;
}

void check_model_source_record(const JsonField& record) {
  record.object();
  record.at("family").string();
  if (record.at("format").string() != "zest") record.at("config_text").string();
}

}  // namespace zest
