// NaN/Inf scan of a dataset's shards (see dataset_check.h).
#include "data/dataset_check.h"

#include "formats/safetensors.h"
#include "core/check.h"
#include "core/untrusted_file.h"

#include <torch/torch.h>

#include <algorithm>

namespace zest {
namespace {

constexpr int64_t kChunkElements = int64_t{1} << 22;  // 16 MB of float32 at a time

bool is_floating(torch::Dtype dtype) {
  return dtype == torch::kFloat32 || dtype == torch::kFloat64 || dtype == torch::kFloat16 ||
         dtype == torch::kBFloat16;
}

// Which sample a row of `tensor` belongs to: motion rows are frames (motion_offsets maps them to clips),
// every other tensor has one row per sample.
int64_t sample_of_row(const std::string& tensor, int64_t row, const std::vector<int64_t>& offsets) {
  if (tensor != "motion" || offsets.empty()) return row;
  return static_cast<int64_t>(std::upper_bound(offsets.begin(), offsets.end(), row) - offsets.begin()) - 1;
}

std::vector<int64_t> motion_offsets(const safetensors::Reader& reader) {
  if (!reader.contains("motion_offsets") || reader.info("motion_offsets").dtype != torch::kInt64) return {};
  const torch::Tensor t = reader.read("motion_offsets");
  return {t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel()};
}

}  // namespace

std::vector<NonFiniteTensor> find_non_finite(const std::string& dir, const DatasetManifest& manifest) {
  std::vector<NonFiniteTensor> found;
  int64_t first_of_shard = 0;
  for (size_t shard = 0; shard < manifest.shards.size(); ++shard) {
    const safetensors::Reader reader(manifest.shard_path(dir, shard));
    const std::vector<int64_t> offsets = motion_offsets(reader);
    for (const safetensors::TensorInfo& info : reader.tensors()) {
      const int64_t numel = info.numel();
      if (!is_floating(info.dtype) || numel == 0 || info.shape.empty()) continue;
      const int64_t row_numel = numel / info.shape[0];
      NonFiniteTensor bad{reader.path(), info.name};
      for (int64_t begin = 0; begin < numel; begin += kChunkElements) {
        const int64_t count = std::min(kChunkElements, numel - begin);
        const torch::Tensor not_finite = torch::isfinite(reader.read_flat_range(info.name, begin, count)).logical_not();
        const int64_t here = not_finite.sum().item<int64_t>();
        if (here == 0) continue;
        if (bad.count == 0) {
          const int64_t element = begin + not_finite.nonzero().index({0, 0}).item<int64_t>();
          bad.sample = sample_of_row(info.name, row_numel > 0 ? element / row_numel : 0, offsets);
          bad.dataset_sample = first_of_shard + bad.sample;
        }
        bad.count += here;
      }
      if (bad.count > 0) found.push_back(std::move(bad));
    }
    first_of_shard += manifest.shards[shard].samples;
  }
  return found;
}

std::string describe_non_finite(const std::string& dir, const std::vector<NonFiniteTensor>& found) {
  constexpr size_t kShown = 8;
  std::string text = str(dir, ": non-finite values (NaN or Inf) in ", found.size(), " tensor(s): ");
  for (size_t i = 0; i < found.size() && i < kShown; ++i) {
    const NonFiniteTensor& t = found[i];
    text += str(i ? "; " : "", t.file, " tensor '", printable(t.tensor), "' (", t.count, " values, first in sample ",
                t.sample, " of the shard = sample ", t.dataset_sample, " of the dataset)");
  }
  if (found.size() > kShown) text += str("; and ", found.size() - kShown, " more");
  return text + "; training on them would make the loss NaN. Regenerate or clean these samples";
}

}  // namespace zest
