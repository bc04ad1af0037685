// The dataset formats' table (DatasetFormatSpec, data/dataset_manifest.h): one row per format, and the
// lookups by format and by a family's dataset kind. A new format is a row here, its dataset class and its
// `zest data synth` generator.
#include "data/dataset_manifest.h"

#include "core/check.h"
#include "data/latent_dataset.h"
#include "data/motion_dataset.h"

namespace zest {
namespace {

template <class DatasetClass>
std::shared_ptr<const Dataset> open_as(std::string dir, DatasetManifest manifest, const DatasetOptions& options) {
  return std::make_shared<DatasetClass>(std::move(dir), std::move(manifest), options);
}

std::string in_words(int64_t n) { return n > 0 ? std::to_string(n) : std::string("default"); }

std::string frames(int64_t length, int64_t /*width*/) { return in_words(length) + " frames"; }

std::string latent_size(int64_t length, int64_t width) {
  return in_words(length) + "x" + in_words(width > 0 ? width : length) + " latents";
}

}  // namespace

const std::vector<DatasetFormatSpec>& dataset_format_specs() {
  static const std::vector<DatasetFormatSpec> specs = {
      {DatasetFormat::motion, "motion", "zest.motion.v1", {"motion_dim", "text_tokens", "text_dim", "pooled_dim"},
       {"pooled_dim"}, "frames", open_as<MotionDataset>, frames},
      {DatasetFormat::latents, "latents", "zest.latents.v1",
       {"channels", "height", "width", "text_tokens", "text_dim", "pooled_dim", "time_ids"},
       {"pooled_dim", "time_ids"}, "latent px", open_as<LatentDataset>, latent_size},
  };
  return specs;
}

const DatasetFormatSpec& dataset_format_spec(DatasetFormat format) {
  for (const DatasetFormatSpec& spec : dataset_format_specs())
    if (spec.format == format) return spec;
  ZEST_FAIL("dataset format ", static_cast<int>(format), " has no row in dataset_format_specs()");
}

DatasetFormat dataset_format_of_kind(const std::string& kind, const std::string& model) {
  std::string kinds;
  for (const DatasetFormatSpec& spec : dataset_format_specs()) {
    if (spec.kind == kind) return spec.format;
    kinds += (kinds.empty() ? "\"" : ", \"") + spec.kind + "\"";
  }
  ZEST_FAIL(model, " trains on an unknown dataset format '", kind, "' (known: ", kinds, ")");
}

const char* format_name(DatasetFormat format) { return dataset_format_spec(format).file_name.c_str(); }

}  // namespace zest
