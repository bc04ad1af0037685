// Dataset base: shard files opened and indexed, tensor checks against dataset.json, open_dataset (the
// format's class from its row of dataset_format_specs()), and collation of samples into batches.
#include "data/dataset.h"

#include "checkpoint/checksum.h"
#include "data/model_features.h"
#include "core/check.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

namespace zest {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

std::string dtype_list(const std::vector<torch::Dtype>& dtypes) {
  std::string names;
  for (torch::Dtype d : dtypes) names += (names.empty() ? "" : " or ") + safetensors::dtype_name(d);
  return names;
}

}  // namespace

const std::vector<torch::Dtype>& float_dtypes() {
  static const std::vector<torch::Dtype> dtypes = {torch::kFloat32, torch::kBFloat16, torch::kFloat16};
  return dtypes;
}

Dataset::Dataset(std::string dir, DatasetManifest manifest) : dir_(std::move(dir)), manifest_(std::move(manifest)) {
  for (size_t i = 0; i < manifest_.shards.size(); ++i) {
    const std::string path = manifest_.shard_path(dir_, i);  // inside the folder, a regular file
    readers_.emplace_back(path);  // validates the header against the file size (truncation)
    starts_.push_back(total_);
    total_ += manifest_.shards[i].samples;
  }
}

std::string Dataset::shard_path(size_t shard) const {
  return (std::filesystem::path(dir_) / manifest_.shards.at(shard).file).string();  // checked on open
}

std::string Dataset::fingerprint() const {
  checkpoint::Xxh64Stream hash;
  auto add = [&](const std::string& text) {
    hash.update(text.data(), text.size());
    hash.update("\n", 1);
  };
  add(format_name(manifest_.format));
  for (const auto& [name, value] : manifest_.features) add(str(name, "=", value));
  constexpr uint64_t kSampleBytes = 64 << 10;
  std::vector<char> bytes;
  for (size_t i = 0; i < readers_.size(); ++i) {
    const safetensors::Reader& r = readers_[i];
    add(str(manifest_.shards[i].file, " ", manifest_.shards[i].samples, " ", r.file_bytes()));
    const uint64_t data_bytes = r.file_bytes() - r.data_start();
    const uint64_t head = std::min(kSampleBytes, data_bytes);
    const uint64_t tail_start = r.data_start() + data_bytes - std::min(kSampleBytes, data_bytes);
    const std::pair<uint64_t, uint64_t> ranges[] = {{0, r.data_start() + head}, {tail_start, r.file_bytes() - tail_start}};
    for (const auto& [offset, n] : ranges) {
      bytes.resize(n);
      r.read_file_range(offset, n, bytes.data());
      hash.update(bytes.data(), bytes.size());
    }
  }
  return checkpoint::to_hex(hash.digest());
}

Dataset::Location Dataset::locate(int64_t index) const {
  ZEST_CHECK(index >= 0 && index < total_, "dataset ", dir_, ": sample index ", index, " outside [0, ", total_,
             ")");
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), index);
  const size_t shard = static_cast<size_t>(it - starts_.begin()) - 1;
  return {shard, index - starts_[shard]};
}

std::string Dataset::where(int64_t index) const {
  const Location at = locate(index);
  return str(shard_path(at.shard), " (sample ", at.local, " of the shard)");
}

void Dataset::expect_tensor(size_t shard, const std::string& name, const std::vector<torch::Dtype>& dtypes,
                            const std::vector<int64_t>& shape) const {
  const safetensors::Reader& r = readers_.at(shard);
  ZEST_CHECK(r.contains(name), r.path(), ": missing tensor '", name, "' (", format_name(manifest_.format),
             " shards need it; expected shape ", shape_text(shape), ")");
  const safetensors::TensorInfo& info = r.info(name);
  ZEST_CHECK(std::find(dtypes.begin(), dtypes.end(), info.dtype) != dtypes.end(), r.path(), ": tensor '", name,
             "' has dtype ", safetensors::dtype_name(info.dtype), ", expected ", dtype_list(dtypes));
  if (info.shape == shape) return;
  ZEST_CHECK(info.shape.size() == shape.size(), r.path(), ": tensor '", name, "' has shape ",
             shape_text(info.shape), ", expected ", shape_text(shape));
  ZEST_CHECK(info.shape[0] == shape[0], r.path(), ": tensor '", name, "' holds ", info.shape[0],
             " entries but dataset.json lists ", shape[0], " for this shard (sample count mismatch)");
  ZEST_FAIL(r.path(), ": wrong feature width: tensor '", name, "' has shape ", shape_text(info.shape),
            " but dataset.json's features give ", shape_text(shape));
}

std::shared_ptr<const Dataset> open_dataset(const std::string& dir, const DatasetOptions& options,
                                            const ExpectedFeatures* expected) {
  DatasetManifest manifest = read_manifest(dir);
  if (expected != nullptr) check_features(dir, manifest, *expected);
  const DatasetFormatSpec& spec = dataset_format_spec(manifest.format);
  return spec.open(dir, std::move(manifest), options);
}

Sample collate(const std::vector<Sample>& samples, bool pinned) {
  ZEST_CHECK(!samples.empty(), "collate: no samples");
  Sample batch;
  for (const auto& [name, first] : samples.front()) {
    std::vector<torch::Tensor> parts;
    parts.reserve(samples.size());
    for (const Sample& s : samples) {
      const auto it = s.find(name);
      ZEST_CHECK(it != s.end(), "collate: a sample lacks '", name, "'");
      ZEST_CHECK(it->second.sizes() == first.sizes(), "collate: '", name, "' has shape ", it->second.sizes(),
                 " in one sample and ", first.sizes(), " in another");
      parts.push_back(it->second);
    }
    if (!pinned) {
      batch[name] = torch::stack(parts);
      continue;
    }
    // Stacked straight into page-locked memory: the copy to the GPU is then an asynchronous DMA.
    std::vector<int64_t> shape{static_cast<int64_t>(samples.size())};
    for (const int64_t d : first.sizes()) shape.push_back(d);
    auto out = torch::empty(shape, first.options().pinned_memory(true));
    torch::stack_out(out, parts, 0);
    batch[name] = out;
  }
  return batch;
}

}  // namespace zest
