// Recognising a pretrained path and reading a folder's architecture (see pretrained_source.h).
#include "models/pretrained_source.h"

#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_text.h"
#include "formats/config_json.h"
#include "models/hymotion/released_format.h"
#include "formats/torch_archive.h"
#include "models/tensor_json.h"
#include "models/unet/diffusers_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace zest {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) { return read_text_file(path, "model configuration", 16ull << 20); }

std::string listing(const fs::path& folder) {
  std::string names;
  for (const auto& entry : fs::directory_iterator(folder))
    names += (names.empty() ? "" : ", ") + entry.path().filename().string() + (entry.is_directory() ? "/" : "");
  return names.empty() ? "nothing" : names;
}

// A folder of diffusers' model format, or nullopt when it has no config.json.
std::optional<PretrainedLayout> diffusers_layout(const fs::path& folder) {
  const fs::path config = folder / unet::kDiffusersConfigName;
  if (!fs::is_regular_file(config)) return std::nullopt;
  const fs::path single = folder / unet::kDiffusersWeightsName;
  const fs::path index = folder / (std::string(unet::kDiffusersWeightsName) + ".index.json");
  for (const fs::path& weights : {single, index}) {
    if (fs::is_regular_file(weights))
      return PretrainedLayout{PretrainedFormat::diffusers, folder.string(), config.string(), weights.string()};
  }
  ZEST_CHECK(!fs::exists(folder / "diffusion_pytorch_model.bin"), folder.string(),
             ": holds only PyTorch .bin weights; zest reads safetensors (in diffusers: "
             "UNet2DConditionModel.from_pretrained(DIR).save_pretrained(OUT, safe_serialization=True))");
  ZEST_FAIL(folder.string(), ": a config.json without ", unet::kDiffusersWeightsName, " or its .index.json (found: ",
            listing(folder), "); for a variant such as diffusion_pytorch_model.fp16.safetensors, point a copy ",
            "or link named ", unet::kDiffusersWeightsName, " at it");
}

ResolvedModel resolved_from_folder(const PretrainedLayout& layout, const std::string& path) {
  ResolvedModel model;
  model.pretrained = path;
  const fs::path given = fs::path(path).lexically_normal();
  model.name = given.has_filename() ? given.filename().string() : given.parent_path().filename().string();
  model.source = layout.config_file + " (as a zest model configuration)";
  const std::string text = read_text(layout.config_file);
  nlohmann::ordered_json architecture;
  std::string header;
  if (layout.format == PretrainedFormat::diffusers) {
    const nlohmann::ordered_json config = parse_ordered_json(text, layout.config_file);
    unet::DiffusersConfig read = unet::read_diffusers_config(config, layout.config_file);
    architecture = std::move(read.architecture);
    model.notes = std::move(read.notes);
    model.family = &model_family("unet");
    header = "architecture of " + layout.config_file + " (diffusers' UNet2DConditionModel fields)";
  } else {
    hymotion::ReleaseConfig read = hymotion::read_release_config(text, layout.config_file);
    architecture = std::move(read.architecture);
    model.notes = std::move(read.notes);
    model.family = &model_family("hymotion");
    header = "architecture of " + layout.config_file + " (network_module_args of HunyuanMotionMMDiT)";
  }
  model.toml_text = json_to_toml(architecture, header, layout.config_file);
  model.description = model.name + " (" + model.family->name + ", pretrained)";
  return model;
}

}  // namespace

const char* to_string(PretrainedFormat format) {
  switch (format) {
    case PretrainedFormat::diffusers: return "diffusers";
    case PretrainedFormat::hymotion: return "hymotion";
    case PretrainedFormat::safetensors: return "safetensors";
  }
  return "?";
}

PretrainedLayout find_pretrained_layout(const std::string& path) {
  const fs::path p(path);
  ZEST_CHECK(fs::exists(p), "pretrained weights not found: ", path);
  if (!fs::is_directory(p)) {
    require_regular_file(path, "pretrained weights");  // a FIFO or a link to a device would never end
    const bool ok = path.ends_with(".safetensors") || path.ends_with(".safetensors.index.json");
    ZEST_CHECK(ok, path, ": expected a .safetensors or .safetensors.index.json file, or a model folder");
    return {PretrainedFormat::safetensors, "", "", path};
  }
  const fs::path yml = p / hymotion::kReleaseConfigName, ckpt = p / hymotion::kReleaseWeightsName;
  if (fs::is_regular_file(yml) || fs::is_regular_file(ckpt)) {
    ZEST_CHECK(fs::is_regular_file(yml) && fs::is_regular_file(ckpt), path, ": a HY-Motion release folder needs ",
               hymotion::kReleaseConfigName, " and ", hymotion::kReleaseWeightsName, " (found: ", listing(p), ")");
    return {PretrainedFormat::hymotion, p.string(), yml.string(), ckpt.string()};
  }
  if (auto layout = diffusers_layout(p)) return *layout;
  if (fs::is_directory(p / "unet")) {  // a diffusers pipeline folder (model_index.json, unet/, vae/, ...)
    if (auto layout = diffusers_layout(p / "unet")) return *layout;
    ZEST_FAIL(path, "/unet: no config.json (found: ", listing(p / "unet"), ")");
  }
  ZEST_FAIL(path, ": not a model folder zest knows: expected config.json + ", unet::kDiffusersWeightsName,
            " (diffusers UNet), a unet/ subfolder (diffusers pipeline) or ", hymotion::kReleaseConfigName, " + ",
            hymotion::kReleaseWeightsName, " (HY-Motion release); found: ", listing(p));
}

ResolvedModel resolve_pretrained_folder(const std::string& path) {
  const PretrainedLayout layout = find_pretrained_layout(path);
  ZEST_CHECK(layout.format != PretrainedFormat::safetensors, path, " is not a folder");
  return resolved_from_folder(layout, path);
}

nlohmann::json model_source_record(const ResolvedModel& model) {
  ZEST_CHECK(model.family != nullptr, "model_source_record: unresolved model");
  nlohmann::json record = {{"family", model.family->name}, {"format", "zest"}};
  if (model.pretrained.empty()) return record;
  const PretrainedLayout layout = find_pretrained_layout(model.pretrained);
  if (layout.format == PretrainedFormat::safetensors) return record;
  record["format"] = to_string(layout.format);
  record["config_text"] = read_text(layout.config_file);
  if (layout.format == PretrainedFormat::hymotion) {
    const hymotion::TorchArchiveReader archive(layout.weights_file);
    const auto& names = hymotion::release_pipeline_tensor_names();
    nlohmann::json tensors = nlohmann::json::object();
    for (const hymotion::ArchiveTensor& t : archive.state_dict(hymotion::kReleaseStateDictKey)) {
      if (std::find(names.begin(), names.end(), t.name) != names.end()) tensors[t.name] = tensor_to_json(archive.read(t));
    }
    record["tensors"] = tensors;
  }
  return record;
}

}  // namespace zest
