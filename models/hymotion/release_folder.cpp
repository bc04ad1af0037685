// HY-Motion's release folder format (see release_folder.h; the file contents are released_format.h's).
#include "models/hymotion/release_folder.h"

#include "checkpoint/shard_reader.h"
#include "checkpoint/verify.h"
#include "core/check.h"
#include "formats/tensor_json.h"
#include "formats/torch_archive.h"
#include "models/hymotion/released_format.h"
#include "models/pretrained_weights.h"

#include <algorithm>
#include <filesystem>

namespace zest::hymotion {
namespace {

namespace fs = std::filesystem;
using checkpoint::MergeResult;

bool is_pipeline_tensor(const std::string& name) {
  const auto& names = release_pipeline_tensor_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

// latest.ckpt: the pipeline's state dict; "motion_transformer.<name>" is the network's <name>.
class ReleaseWeights final : public PretrainedWeights {
 public:
  explicit ReleaseWeights(const std::string& path) : PretrainedWeights(path), archive_(path) {
    const std::string prefix = kReleaseNetworkPrefix;
    entries_ = archive_.state_dict(kReleaseStateDictKey);
    for (size_t i = 0; i < entries_.size(); ++i) {
      const ArchiveTensor& e = entries_[i];
      if (is_pipeline_tensor(e.name)) {
        passed_over_.push_back(e.name);
        continue;
      }
      const bool is_network = e.name.rfind(prefix, 0) == 0;
      tensors_.push_back({is_network ? e.name.substr(prefix.size()) : e.name, e.name, e.tensor.shape, e.tensor.dtype, i});
    }
  }

  torch::Tensor read(const SourceTensor& t) const override { return archive_.read(entries_.at(t.file)); }

 private:
  TorchArchiveReader archive_;
  std::vector<ArchiveTensor> entries_;
};

// Either file present makes it a release folder, which then needs both.
std::optional<PretrainedLayout> find_release_layout(const fs::path& folder) {
  const fs::path yml = folder / kReleaseConfigName, ckpt = folder / kReleaseWeightsName;
  if (!fs::is_regular_file(yml) && !fs::is_regular_file(ckpt)) return std::nullopt;
  ZEST_CHECK(fs::is_regular_file(yml) && fs::is_regular_file(ckpt), folder.string(),
             ": a HY-Motion release folder needs ", kReleaseConfigName, " and ", kReleaseWeightsName,
             " (found: ", folder_listing(folder), ")");
  return PretrainedLayout{"hymotion", folder.string(), yml.string(), ckpt.string()};
}

FolderConfig read_config(const std::string& text, const std::string& path) {
  ReleaseConfig read = read_release_config(text, path);
  return {std::move(read.architecture), std::move(read.notes)};
}

// The release's pipeline tensors, so that an export writes them again.
void add_pipeline_tensors(const PretrainedLayout& layout, nlohmann::json& record) {
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, tensor] : read_release_pipeline_tensors(layout.weights_file)) tensors[name] = tensor_to_json(tensor);
  record["tensors"] = tensors;
}

void check_rank_files(const std::string& dir, const checkpoint::Manifest& manifest) {
  for (int rank = 0; rank < static_cast<int>(manifest.files.size()); ++rank) {
    const checkpoint::FileStatus status = checkpoint::check_rank_file(dir, manifest, rank, /*hash=*/false);
    ZEST_CHECK(status.ok(), status.problem(manifest.files[static_cast<size_t>(rank)]));
  }
}

// latest.ckpt: the network under "motion_transformer.", then the source's pipeline tensors.
MergeResult export_release_weights(const FolderExport& request) {
  const checkpoint::Manifest& manifest = request.manifest;
  const std::string kind = checkpoint::merged_kind(manifest, request.options, request.dir);  // "master" or "ema"
  check_rank_files(request.dir, manifest);
  fs::create_directories(request.out);
  const fs::path weights = request.out / kReleaseWeightsName;
  MergeResult result;
  TorchArchiveWriter writer(weights.string());
  checkpoint::ShardReader reader(request.dir, manifest);
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
      values = values.view(slot.shape).to(request.options.dtype);
      add(kReleaseNetworkPrefix + slot.name, values);
      for (const std::string& alias : slot.aliases) add(kReleaseNetworkPrefix + alias, values);
    }
  }
  // A release's own pipeline tensors, as they came (HY-Motion loads with strict=False and keeps its own
  // initialisation for any that are absent).
  const JsonField tensors = request.source.at("tensors");
  for (const std::string& name : release_pipeline_tensor_names()) {
    if (tensors.exists() && tensors.object().has(name)) add(name, tensor_from_json(tensors.at(name)));
  }
  writer.finish(kReleaseStateDictKey);
  result.files = {weights.string()};
  return result;
}

}  // namespace

std::map<std::string, torch::Tensor> read_release_pipeline_tensors(const std::string& weights_file) {
  const TorchArchiveReader archive(weights_file);
  std::map<std::string, torch::Tensor> tensors;
  for (const ArchiveTensor& t : archive.state_dict(kReleaseStateDictKey))
    if (is_pipeline_tensor(t.name)) tensors[t.name] = archive.read(t);
  return tensors;
}

FolderFormat release_folder_format() {
  FolderFormat format;
  format.name = "hymotion";
  format.expected_files = std::string(kReleaseConfigName) + " + " + kReleaseWeightsName + " (HY-Motion release)";
  format.config_fields = "network_module_args of HunyuanMotionMMDiT";
  format.config_name = kReleaseConfigName;
  format.find_layout = find_release_layout;
  format.read_config = read_config;
  format.write_config = release_config_yaml;
  format.export_weights = export_release_weights;
  format.open_weights = [](const PretrainedLayout& layout) -> std::unique_ptr<PretrainedWeights> {
    return std::make_unique<ReleaseWeights>(layout.weights_file);
  };
  format.add_source_record = add_pipeline_tensors;
  return format;
}

}  // namespace zest::hymotion
