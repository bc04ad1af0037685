// diffusers' UNet folder format (see diffusers_folder.h; config.json's fields are diffusers_config.h's).
#include "models/unet/diffusers_folder.h"

#include "core/check.h"
#include "formats/json_text.h"
#include "models/unet/diffusers_config.h"

#include <filesystem>
#include <regex>

namespace zest::unet {
namespace {

namespace fs = std::filesystem;
using checkpoint::MergeResult;

// A folder of diffusers' model format, or nullopt when it has no config.json.
std::optional<PretrainedLayout> model_folder_layout(const fs::path& folder) {
  const fs::path config = folder / kDiffusersConfigName;
  if (!fs::is_regular_file(config)) return std::nullopt;
  const fs::path single = folder / kDiffusersWeightsName;
  const fs::path index = folder / (std::string(kDiffusersWeightsName) + ".index.json");
  for (const fs::path& weights : {single, index}) {
    if (fs::is_regular_file(weights)) return PretrainedLayout{"diffusers", folder.string(), config.string(), weights.string()};
  }
  ZEST_CHECK(!fs::exists(folder / "diffusion_pytorch_model.bin"), folder.string(),
             ": holds only PyTorch .bin weights; zest reads safetensors (in diffusers: "
             "UNet2DConditionModel.from_pretrained(DIR).save_pretrained(OUT, safe_serialization=True))");
  ZEST_FAIL(folder.string(), ": a config.json without ", kDiffusersWeightsName, " or its .index.json (found: ",
            folder_listing(folder), "); for a variant such as diffusion_pytorch_model.fp16.safetensors, point a copy ",
            "or link named ", kDiffusersWeightsName, " at it");
}

// The folder itself, or a diffusers pipeline folder (model_index.json, unet/, vae/, ...) by its unet/.
std::optional<PretrainedLayout> find_diffusers_layout(const fs::path& folder) {
  if (auto layout = model_folder_layout(folder)) return layout;
  if (!fs::is_directory(folder / "unet")) return std::nullopt;
  if (auto layout = model_folder_layout(folder / "unet")) return layout;
  ZEST_FAIL(folder.string(), "/unet: no config.json (found: ", folder_listing(folder / "unet"), ")");
}

FolderConfig read_config(const std::string& text, const std::string& path) {
  DiffusersConfig read = read_diffusers_config(parse_ordered_json(text, path), path);
  return {std::move(read.architecture), std::move(read.notes)};
}

std::string write_config(const nlohmann::ordered_json& model_config) {
  return diffusers_config_json(model_config).dump(2) + "\n";
}

// Weight files an earlier export left in the folder that this one did not write (diffusers would read
// a stale index in preference to a new single file).
void remove_stale_weights(const fs::path& folder, const MergeResult& result) {
  const std::regex ours("diffusion_pytorch_model(-[0-9]+-of-[0-9]+)?\\.safetensors(\\.index\\.json)?");
  for (const auto& entry : fs::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, ours)) continue;
    bool written = entry.path() == fs::path(result.index_path);
    for (const std::string& file : result.files) written = written || entry.path() == fs::path(file);
    if (!written) fs::remove(entry.path());
  }
}

// The merge's safetensors file (or diffusers' shards + index past options.shard_size_bytes).
MergeResult export_diffusers_weights(const FolderExport& request) {
  fs::create_directories(request.out);
  MergeResult result =
      checkpoint::merge_offline(request.dir, (request.out / kDiffusersWeightsName).string(), request.options);
  remove_stale_weights(request.out, result);
  return result;
}

}  // namespace

FolderFormat diffusers_folder_format() {
  FolderFormat format;
  format.name = "diffusers";
  format.expected_files = std::string(kDiffusersConfigName) + " + " + kDiffusersWeightsName +
                          " (diffusers UNet), a unet/ subfolder (diffusers pipeline)";
  format.config_fields = std::string("diffusers' ") + kDiffusersClassName + " fields";
  format.config_name = kDiffusersConfigName;
  format.weights_name = kDiffusersWeightsName;
  format.find_layout = find_diffusers_layout;
  format.read_config = read_config;
  format.write_config = write_config;
  format.export_weights = export_diffusers_weights;
  return format;
}

}  // namespace zest::unet
