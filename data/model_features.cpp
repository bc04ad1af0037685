// Feature widths of a model configuration, as its family declares them (ModelFamily::dataset_features),
// and the dataset-vs-model check.
#include "data/model_features.h"

#include "core/check.h"
#include "models/model_resolve.h"

#include <filesystem>

namespace zest {

ExpectedFeatures model_features(const ResolvedModel& model) {
  ZEST_CHECK(model.family != nullptr, "model_features: unresolved model");
  ConfigTable table = model_config_table(model);
  DatasetFeatures read = model.family->dataset_features(table, model.source);
  ExpectedFeatures e;
  e.format = dataset_format_of_kind(read.format, "model family '" + model.family->name + "'");
  e.features = std::move(read.features);
  e.defaults = std::move(read.defaults);
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
