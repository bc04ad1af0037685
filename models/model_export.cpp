// Checkpoint exports for inference (see model_export.h): the weights stream out of the rank files piece
// by piece; the config comes from the checkpoint's model_source record (the pretrained folder's own
// file, verbatim) or is written from the model configuration the manifest holds.
#include "models/model_export.h"

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "checkpoint/shard_reader.h"
#include "checkpoint/verify.h"
#include "core/check.h"
#include "formats/config_json.h"
#include "models/hymotion/released_format.h"
#include "formats/torch_archive.h"
#include "models/registry.h"
#include "models/tensor_json.h"
#include "models/unet/diffusers_config.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <regex>

namespace zest {
namespace {

namespace fs = std::filesystem;
using checkpoint::Manifest;
using checkpoint::MergeOptions;
using checkpoint::MergeResult;

// The checkpoint's model_source record (saved by `zest train`); a checkpoint without one names a
// built-in configuration or a <family>_*.toml file, which gives the family.
nlohmann::json model_source_of(const Manifest& m, const std::string& dir) {
  const nlohmann::json extra = nlohmann::json::parse(m.extra_json, nullptr, /*allow_exceptions=*/false);
  if (extra.is_object() && extra.contains("model_source") && extra["model_source"].is_object())
    return extra["model_source"];
  for (const BuiltinModelConfig& builtin : builtin_model_configs())
    if (builtin.name == m.model_name) return {{"family", builtin.family}, {"format", "zest"}};
  for (const ModelFamily& family : model_families())
    if (m.model_name.rfind(family.name + "_", 0) == 0) return {{"family", family.name}, {"format", "zest"}};
  ZEST_FAIL(dir, ": cannot tell the model family of '", m.model_name, "' (the checkpoint has no model_source record)");
}

void check_family(const nlohmann::json& source, const std::string& family, const char* format, const std::string& dir) {
  const std::string held = source.value("family", std::string("?"));
  ZEST_CHECK(held == family, dir, ": --format ", format, " exports ", family, " models; this checkpoint holds a ",
             held, " model (use --format ", held == "unet" ? "diffusers" : held == "hymotion" ? "hymotion" : "safetensors",
             ")");
}

// Written under a temporary name, fsynced and renamed: a reader never sees half a config.
void write_text_file(const fs::path& path, const std::string& text) {
  checkpoint::write_file_synced(path.string() + ".tmp", text);
  ZEST_CHECK(std::rename((path.string() + ".tmp").c_str(), path.c_str()) == 0, "cannot rename ", path.string(), ".tmp");
}

void check_rank_files(const std::string& dir, const Manifest& manifest) {
  for (int rank = 0; rank < static_cast<int>(manifest.files.size()); ++rank) {
    const checkpoint::FileStatus status = checkpoint::check_rank_file(dir, manifest, rank, /*hash=*/false);
    ZEST_CHECK(status.ok(), status.problem(manifest.files[static_cast<size_t>(rank)]));
  }
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

MergeResult export_diffusers(const std::string& dir, const Manifest& manifest, const nlohmann::json& source,
                             const fs::path& out, const MergeOptions& options) {
  check_family(source, "unet", "diffusers", dir);
  const std::string config = source.value("format", "") == "diffusers"
                                 ? source.at("config_text").get<std::string>()
                                 : unet::diffusers_config_json(toml_to_json(manifest.model_config, dir)).dump(2) + "\n";
  fs::create_directories(out);
  MergeResult result = checkpoint::merge_offline(dir, (out / unet::kDiffusersWeightsName).string(), options);
  remove_stale_weights(out, result);
  write_text_file(out / unet::kDiffusersConfigName, config);
  result.files.push_back((out / unet::kDiffusersConfigName).string());
  return result;
}

MergeResult export_hymotion(const std::string& dir, const Manifest& manifest, const nlohmann::json& source,
                            const fs::path& out, const MergeOptions& options) {
  check_family(source, "hymotion", "hymotion", dir);
  const std::string config = source.value("format", "") == "hymotion"
                                 ? source.at("config_text").get<std::string>()
                                 : hymotion::release_config_yaml(toml_to_json(manifest.model_config, dir));
  const std::string kind = checkpoint::merged_kind(manifest, options, dir);  // "master" or "ema"
  check_rank_files(dir, manifest);
  fs::create_directories(out);
  const fs::path weights = out / hymotion::kReleaseWeightsName;
  MergeResult result;
  hymotion::TorchArchiveWriter writer(weights.string());
  checkpoint::ShardReader reader(dir, manifest);
  auto add = [&](const std::string& name, const torch::Tensor& tensor) {
    writer.add(name, tensor);
    result.total_bytes += static_cast<uint64_t>(tensor.numel() * tensor.element_size());
    ++result.tensors;
  };
  for (size_t u = 0; u < manifest.units.size(); ++u) {
    for (const ParamSlot& slot : manifest.units[u].slots) {
      // One parameter at a time (the largest HY-Motion tensor is 11.5M elements).
      torch::Tensor values = torch::empty({slot.numel}, torch::kFloat32);
      reader.read(kind, u, slot.offset, slot.numel, values.data_ptr<float>());
      values = values.view(slot.shape).to(options.dtype);
      add(hymotion::kReleaseNetworkPrefix + slot.name, values);
      for (const std::string& alias : slot.aliases) add(hymotion::kReleaseNetworkPrefix + alias, values);
    }
  }
  // A release's own pipeline tensors, as they came (HY-Motion loads with strict=False and keeps its own
  // initialisation for any that are absent).
  const nlohmann::json tensors = source.value("tensors", nlohmann::json::object());
  for (const std::string& name : hymotion::release_pipeline_tensor_names()) {
    if (tensors.contains(name)) add(name, tensor_from_json(tensors[name], dir + ": model_source tensor " + name));
  }
  writer.finish(hymotion::kReleaseStateDictKey);
  write_text_file(out / hymotion::kReleaseConfigName, config);
  result.files = {weights.string(), (out / hymotion::kReleaseConfigName).string()};
  return result;
}

}  // namespace

ExportFormat parse_export_format(const std::string& name) {
  if (name == "safetensors") return ExportFormat::safetensors;
  if (name == "diffusers") return ExportFormat::diffusers;
  if (name == "hymotion") return ExportFormat::hymotion;
  ZEST_FAIL("unknown export format '", name, "' (expected safetensors, diffusers or hymotion)");
}

MergeResult export_checkpoint(const std::string& ckpt, const std::string& out, const MergeOptions& options,
                              ExportFormat format) {
  if (format == ExportFormat::safetensors) return checkpoint::merge_offline(ckpt, out, options);
  const std::string dir = checkpoint::resolve_checkpoint(ckpt);
  const Manifest manifest = checkpoint::read_manifest(dir);
  const nlohmann::json source = model_source_of(manifest, dir);
  checkpoint::merged_kind(manifest, options, dir);  // --ema without a saved EMA: refused before any output
  ZEST_CHECK(!fs::exists(out) || fs::is_directory(out), out, ": --format ", format == ExportFormat::diffusers ?
             "diffusers" : "hymotion", " writes a folder; this is a file");
  if (format == ExportFormat::diffusers) return export_diffusers(dir, manifest, source, out, options);
  return export_hymotion(dir, manifest, source, out, options);
}

}  // namespace zest
