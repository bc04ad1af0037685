// Feature widths of a model configuration, read with the family's own configuration parser (so the
// defaults and validation are the model's), and the dataset-vs-model check.
#include "data/model_features.h"

#include "core/check.h"
#include "models/hymotion/hymotion_config.h"
#include "models/model_resolve.h"
#include "models/unet/unet_config.h"

#include <filesystem>

namespace zest {
namespace {

ExpectedFeatures hymotion_features(const ResolvedModel& model) {
  ConfigTable table = model_config_table(model);
  const auto c = hymotion::HyMotionConfig::from_toml(table);
  ExpectedFeatures e;
  e.format = DatasetFormat::motion;
  e.features = {{"motion_dim", c.input_dim}, {"text_dim", c.ctxt_input_dim}, {"pooled_dim", c.vtxt_input_dim}};
  // The released models: Qwen3 tokens padded to 128, clips of up to 360 frames (12 s at 30 fps).
  // Small test configurations get small defaults so that they train on a CPU in seconds.
  const bool full_size = c.ctxt_input_dim >= 1024;
  e.defaults = {{"text_tokens", full_size ? 128 : 8},
                {"min_frames", full_size ? 60 : 12},
                {"max_frames", full_size ? 360 : 40}};
  return e;
}

ExpectedFeatures unet_features(const ResolvedModel& model) {
  ConfigTable table = model_config_table(model);
  const auto c = unet::UNetConfig::from_toml(table);
  ConfigTable raw = model_config_table(model);  // sample_size is inert to the model: read it directly
  const int64_t sample_size = raw.is_array("sample_size") ? raw.get<std::vector<int64_t>>("sample_size", {64})[0]
                                                          : raw.get<int64_t>("sample_size", 64);
  ZEST_CHECK(!c.cross_attention_dim.empty(), model.source, ": cross_attention_dim is missing");
  for (int64_t dim : c.cross_attention_dim)
    ZEST_CHECK(dim == c.cross_attention_dim[0], model.source,
               ": per-block cross_attention_dim values differ; zest's latent datasets have one text width");
  ExpectedFeatures e;
  e.format = DatasetFormat::latents;
  const int64_t pooled =
      c.text_time_embedding ? c.projection_class_embeddings_input_dim - 6 * c.addition_time_embed_dim : 0;
  e.features = {{"channels", c.in_channels},
                {"text_dim", c.cross_attention_dim[0]},
                {"pooled_dim", pooled},
                {"time_ids", c.text_time_embedding ? 1 : 0}};
  e.defaults = {{"text_tokens", 77}, {"height", sample_size}, {"width", sample_size}};
  return e;
}

}  // namespace

ExpectedFeatures model_features(const ResolvedModel& model) {
  ZEST_CHECK(model.family != nullptr, "model_features: unresolved model");
  ExpectedFeatures e;
  if (model.family->name == "hymotion") {
    e = hymotion_features(model);
  } else if (model.family->name == "unet") {
    e = unet_features(model);
  } else {
    ZEST_FAIL("no dataset format is known for model family '", model.family->name, "'");
  }
  e.model = "model " + model.description;
  return e;
}

ExpectedFeatures builtin_model_features(const std::string& flavor) {
  ModelSelection selection;
  selection.name = flavor;
  return model_features(resolve_model(selection));
}

void check_features(const std::string& dir, const DatasetManifest& m, const ExpectedFeatures& expected) {
  const std::string path = (std::filesystem::path(dir) / "dataset.json").string();
  ZEST_CHECK(m.format == expected.format, path, ": the dataset is ", format_name(m.format), " but ",
             expected.model, " trains on ", format_name(expected.format));
  for (const auto& [name, width] : expected.features) {
    const auto it = m.features.find(name);
    ZEST_CHECK(it != m.features.end(), path, ": features.", name, " is missing (", expected.model, " needs ",
               width, ")");
    ZEST_CHECK(it->second == width, path, ": wrong feature width: features.", name, " = ", it->second,
               " but ", expected.model, " expects ", width);
  }
}

}  // namespace zest
