// TrainData: the run's dataset → this rank's loader (see train_data.h).
#include "tools/train_data.h"

#include "data/dataset.h"
#include "data/loader.h"
#include "data/model_features.h"
#include "core/check.h"

#include <filesystem>

namespace zest {

struct TrainData::Impl {
  std::shared_ptr<const Dataset> dataset;
  std::unique_ptr<DataLoader> loader;
  bool is_motion = true;
};

TrainData::TrainData(const RunConfig& config, const ResolvedModel& model, const Communicator& comm)
    : impl_(std::make_unique<Impl>()) {
  const std::string& dir = config.data.dir;
  ZEST_CHECK(std::filesystem::is_regular_file(std::filesystem::path(dir) / "dataset.json"), "data.dir '", dir,
             "' (", config.source, ") holds no dataset.json; create one with `zest data synth --model ",
             model.name, " --out ", dir, " --samples N` or point data.dir at a dataset (docs/data_formats.md)");
  const ExpectedFeatures expected = model_features(model);
  DatasetOptions dataset_options;
  dataset_options.seq_len = config.data.seq_len;
  impl_->dataset = open_dataset(dir, dataset_options, &expected);
  impl_->is_motion = expected.format == DatasetFormat::motion;
  SamplerOptions sampler;
  sampler.seed = static_cast<uint64_t>(config.train.seed);
  LoaderOptions loader;
  loader.batch_size = config.data.batch_size;
  loader.num_workers = config.data.num_workers;
  loader.seed = static_cast<uint64_t>(config.train.seed);
  impl_->loader = std::make_unique<DataLoader>(
      impl_->dataset, DistributedSampler(impl_->dataset->size(), comm.rank(), comm.size(), sampler), loader);
}

TrainData::~TrainData() = default;

TensorMap TrainData::next() { return impl_->loader->next(); }

nlohmann::json TrainData::state() const {
  const SamplerPosition p = impl_->loader->state();
  return {{"epoch", p.epoch}, {"index", p.index}};
}

void TrainData::load_state(const nlohmann::json& state) {
  SamplerPosition p;
  p.epoch = state.at("epoch").get<int64_t>();
  p.index = state.at("index").get<int64_t>();
  impl_->loader->load_state(p);
}

std::string TrainData::items_name() const { return impl_->is_motion ? "frames" : "latent px"; }

int64_t TrainData::items_in(const TensorMap& batch) const {
  if (impl_->is_motion) return batch.at("x_mask_temporal").sum().item<int64_t>();  // valid frames only
  const auto& sample = batch.at("sample");
  return sample.size(0) * sample.size(2) * sample.size(3);
}

}  // namespace zest
