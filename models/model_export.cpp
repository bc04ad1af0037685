// Checkpoint exports for inference (see model_export.h): the folder format's family writes the weights;
// the config comes from the checkpoint's model_source record (the pretrained folder's own file,
// verbatim) or is written by the format from the model configuration the manifest holds.
#include "models/model_export.h"

#include "checkpoint/directory.h"
#include "checkpoint/manifest.h"
#include "checkpoint/output_path.h"
#include "core/check.h"
#include "formats/config_json.h"
#include "formats/json_field.h"
#include "formats/safetensors.h"
#include "models/common/lora.h"
#include "models/lora_file.h"
#include "models/pretrained_source.h"
#include "models/registry.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

namespace zest {
namespace {

namespace fs = std::filesystem;
using checkpoint::Manifest;
using checkpoint::MergeOptions;
using checkpoint::MergeResult;

// The checkpoint's model_source record (saved by `zest train`, checked as pretrained_source.h says); a
// checkpoint without one names a built-in configuration or a <family>_*.toml file, which gives the family.
JsonDocument model_source_of(const Manifest& m, const std::string& dir) {
  const std::string manifest_path = (fs::path(dir) / checkpoint::kManifestName).string();
  const JsonDocument extra = checkpoint::extra_record(m.extra_json, manifest_path);
  const JsonField record = extra.root().null_as_absent().at("model_source");
  if (record.exists()) {
    check_model_source_record(record);
    return JsonDocument(extra.value().at("model_source"), manifest_path, record.path());
  }
  for (const BuiltinModelConfig& builtin : builtin_model_configs())
    if (builtin.name == m.model_name) return JsonDocument({{"family", builtin.family}, {"format", "zest"}}, manifest_path);
  for (const ModelFamily& family : model_families())
    if (m.model_name.rfind(family.name + "_", 0) == 0)
      return JsonDocument({{"family", family.name}, {"format", "zest"}}, manifest_path);
  ZEST_FAIL(dir, ": cannot tell the model family of '", m.model_name, "' (the checkpoint has no model_source record)");
}

// The export format that suits a family: its first folder format, else the plain file.
std::string export_format_of_family(const std::string& family_name) {
  for (const ModelFamily& family : model_families()) {
    if (family.name == family_name && !family.folder_formats.empty()) return family.folder_formats.front().name;
  }
  return kSafetensorsFormat;
}

void check_family(const JsonField& source, const std::string& family, const std::string& format,
                  const std::string& dir) {
  const std::string held = source.at("family").string();
  ZEST_CHECK(held == family, dir, ": --format ", format, " exports ", family, " models; this checkpoint holds a ",
             held, " model (use --format ", export_format_of_family(held), ")");
}

// Written under a temporary name, fsynced and renamed: a reader never sees half a config.
void write_text_file(const fs::path& path, const std::string& text) {
  checkpoint::write_file_synced(path.string() + ".tmp", text);
  ZEST_CHECK(std::rename((path.string() + ".tmp").c_str(), path.c_str()) == 0, "cannot rename ", path.string(), ".tmp");
}

// The config before the weights (an unreadable model configuration fails before anything is written);
// the config file after them.
MergeResult export_folder(const FolderExport& request, const OwnedFolderFormat& owned) {
  const FolderFormat& format = *owned.format;
  check_family(request.source, owned.family->name, format.name, request.dir);
  const std::string config = request.source.at("format").string() == format.name
                                 ? request.source.at("config_text").string()
                                 : format.write_config(toml_to_json(request.manifest.model_config, request.dir));
  MergeResult result = format.export_weights(request);
  write_text_file(request.out / format.config_name, config);
  result.files.push_back((request.out / format.config_name).string());
  return result;
}

// A LoRA run's checkpoint holds only the adapters: the full model is its base with them folded in
// (lora_file.h), held in memory and written as one safetensors file, plain or in a folder format's folder.
MergeResult export_folded_lora(const std::string& dir, const Manifest& manifest, const std::string& out,
                               const MergeOptions& options, const std::string& format) {
  const OwnedFolderFormat owned = find_folder_format(format);
  if (!(format == kSafetensorsFormat || !owned.format->weights_name.empty())) throw Error(str(dir, ": a LoRA run's checkpoint ",
             "exports its adapters (--format lora) or its folded model as safetensors or diffusers; --format ", format,
             " is not one of them"));
  const JsonDocument record = model_source_of(manifest, dir);
  const JsonField source = record.root();
  if (owned.format) check_family(source, owned.family->name, format, dir);
  if (options.shard_size_bytes != 0) throw Error("a folded LoRA model is written as one file; leave out --shard-size");
  checkpoint::check_output_outside(out, fs::path(dir).parent_path().string());
  const std::shared_ptr<UnitModule> model = folded_lora_model(dir, options.ema);
  safetensors::NamedTensors tensors;
  uint64_t bytes = 0;
  for (const auto& item : model->named_parameters()) {
    if (is_adapter_parameter(item.key())) continue;
    tensors.emplace_back(item.key(), item.value().detach().to(options.dtype).contiguous());
    bytes += tensors.back().second.nbytes();
  }
  const safetensors::Metadata metadata{{"format", "pt"}, {"zest.model", manifest.model_name},
                                       {"zest.step", std::to_string(manifest.step)},
                                       {"zest.weights", options.ema ? "ema, LoRA folded" : "master, LoRA folded"}};
  if (!owned.format) {
    safetensors::save_file(out, tensors, metadata);
    return {{out}, "", bytes, static_cast<int64_t>(tensors.size()), {}};
  }
  const fs::path folder(out);
  fs::create_directories(folder);
  const std::string weights = (folder / owned.format->weights_name).string();
  const std::string config = source.at("format").string() == format
                                 ? source.at("config_text").string()
                                 : owned.format->write_config(toml_to_json(manifest.model_config, dir));
  safetensors::save_file(weights, tensors, metadata);
  write_text_file(folder / owned.format->config_name, config);
  return {{weights, (folder / owned.format->config_name).string()}, "", bytes, static_cast<int64_t>(tensors.size()), {}};
}

}  // namespace

std::string parse_export_format(const std::string& name) {
  if (name == kSafetensorsFormat || name == kLoraFormat || find_folder_format(name).format != nullptr) return name;
  const std::vector<OwnedFolderFormat> formats = folder_formats_by_name();
  std::string expected = std::string(kSafetensorsFormat) + ", " + kLoraFormat;
  for (size_t i = 0; i < formats.size(); ++i)
    expected += (i + 1 == formats.size() ? " or " : ", ") + formats[i].format->name;
  ZEST_FAIL("unknown export format '", name, "' (expected ", expected, ")");
}

MergeResult export_checkpoint(const std::string& ckpt, const std::string& out, const MergeOptions& options,
                              const std::string& format) {
  if (parse_export_format(format) == kLoraFormat) return export_lora_file(ckpt, out, options);
  const std::string dir = checkpoint::resolve_checkpoint(ckpt);
  const Manifest manifest = checkpoint::read_manifest(dir);
  if (is_lora_checkpoint(dir)) return export_folded_lora(dir, manifest, out, options, format);
  if (format == kSafetensorsFormat) return checkpoint::merge_offline(ckpt, out, options);
  const JsonDocument record = model_source_of(manifest, dir);
  const JsonField source = record.root();
  checkpoint::merged_kind(manifest, options, dir);  // --ema without a saved EMA: refused before any output
  ZEST_CHECK(!fs::exists(out) || fs::is_directory(out), out, ": --format ", format, " writes a folder; this is a file");
  const fs::path out_folder(out);
  return export_folder({dir, manifest, source, out_folder, options}, find_folder_format(format));
}

}  // namespace zest
