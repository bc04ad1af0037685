// Pretrained weight sources (see pretrained_weights.h): safetensors (single or sharded with an index), or
// the reader of the layout's folder format.
#include "models/pretrained_weights.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "core/untrusted_file.h"
#include "formats/json_field.h"
#include "formats/json_text.h"
#include "models/registry.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

namespace zest {
namespace {

namespace fs = std::filesystem;

// One file, or the shards an index's weight_map names (every mapped tensor must be in its file).
class SafetensorsWeights final : public PretrainedWeights {
 public:
  explicit SafetensorsWeights(const std::string& path) : PretrainedWeights(path) {
    if (!path.ends_with(".index.json")) {
      add_file(path);
      return;
    }
    const std::map<std::string, std::string> weight_map = read_weight_map(path);
    const std::string folder = fs::path(path).parent_path().string();
    std::map<std::string, size_t> file_of_name;  // shard file (normal spelling) → index in files_
    for (const auto& [tensor, file] : weight_map) {
      // Inside the index's folder, a regular file: an entry never reaches another folder or a FIFO.
      const std::string shard =
          confined_path(folder, file, {path, "weight_map[\"" + printable(tensor, 80) + "\"]"});
      if (!file_of_name.count(normal_name(file))) {
        file_of_name[normal_name(file)] = files_.size();
        add_file(shard);
      }
    }
    for (const auto& [tensor, file] : weight_map) {
      const auto& reader = *files_[file_of_name.at(normal_name(file))];
      ZEST_CHECK(reader.contains(tensor), path, ": weight_map puts '", printable(tensor), "' in ", printable(file),
                 ", which does not hold it");
    }
  }

  torch::Tensor read(const SourceTensor& t) const override { return files_.at(t.file)->read(t.stored_name); }

 private:
  static std::map<std::string, std::string> read_weight_map(const std::string& path) {
    const nlohmann::json index = parse_json(read_text_file(path, "safetensors index"), path);
    return JsonField(index, path).at("weight_map").string_map();  // tensor name → shard file
  }

  void add_file(const std::string& file) {
    files_.push_back(std::make_unique<safetensors::Reader>(file));
    for (const safetensors::TensorInfo& info : files_.back()->tensors()) {
      ZEST_CHECK(names_.insert(info.name).second, path_, ": tensor '", printable(info.name), "' is in two shard files");
      tensors_.push_back({info.name, info.name, info.shape, info.dtype, files_.size() - 1});
    }
  }

  std::vector<std::unique_ptr<safetensors::Reader>> files_;
  std::set<std::string> names_;
};

}  // namespace

std::unique_ptr<PretrainedWeights> PretrainedWeights::open(const PretrainedLayout& layout) {
  const OwnedFolderFormat owned = find_folder_format(layout.format);
  if (owned.format && owned.format->open_weights) return owned.format->open_weights(layout);
  return std::make_unique<SafetensorsWeights>(layout.weights_file);
}

}  // namespace zest
