// TrainData: the run's dataset → this rank's loader (see train_data.h).
#include "train/train_data.h"

#include "data/loader.h"
#include "data/model_features.h"
#include "models/model_resolve.h"
#include "models/registry.h"
#include "core/check.h"
#include "core/untrusted_file.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>

namespace zest {

int64_t loader_batches_held(int num_workers) {
  if (num_workers == 0) return 2;  // the samples and their stacked batch
  // Up to 2 per worker ready (LoaderOptions' default), one being built by each worker (samples and the
  // stacked copy), and the one the step uses.
  return std::max(2, 2 * num_workers) + 2 * static_cast<int64_t>(num_workers) + 1;
}

void check_inputs_fit(const DataConfig& data, const SampleBytes& sample, const MemoryBudget& budget) {
  // The inputs may take half of what is left: the other half is for activations, which grow with the
  // same batch_size and seq_len (and are usually larger; an allocation failure there is reported too).
  const double for_inputs = budget.bytes / 2;
  const double held = static_cast<double>(loader_batches_held(data.num_workers));
  const double needed = sample.total() * data.batch_size * held;
  if (needed <= for_inputs) return;
  const std::string context =
      "one sample of inputs is " + format_bytes(sample.total()) + ", a batch of " + std::to_string(data.batch_size) +
      " is " + format_bytes(sample.total() * data.batch_size) + ", and the loader (data.num_workers = " +
      std::to_string(data.num_workers) + ") may hold " + std::to_string(static_cast<int64_t>(held)) +
      " batches: " + format_bytes(needed) + ", more than half of the " + format_bytes(budget.bytes) + " left (" +
      budget.limited_by + ")";
  const double max_batch = std::floor(for_inputs / (sample.total() * held));
  if (max_batch >= 1) {
    throw Error(str("data.batch_size = ", data.batch_size, " does not fit: ", context,
                    "; at most data.batch_size = ", static_cast<int64_t>(max_batch), " fits"));
  }
  const double max_frames = sample.per_frame > 0
                                ? std::floor((for_inputs / held - static_cast<double>(sample.fixed)) / sample.per_frame)
                                : 0;
  if (max_frames >= 1) {
    throw Error(str("data.seq_len = ", sample.frames, " does not fit: ", context,
                    "; even with data.batch_size = 1 at most data.seq_len = ", static_cast<int64_t>(max_frames), " fits"));
  }
  throw Error("the dataset's samples do not fit: " + context + "; even one sample is too large here");
}

struct TrainData::Impl {
  std::shared_ptr<const Dataset> dataset;
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<DevicePrefetcher> prefetch;  // draws from `loader`
  std::string items_name;   // the format's throughput unit (DatasetFormatSpec::items_name)
  std::string fingerprint;  // Dataset::fingerprint(), saved with the data position
  std::function<void(TensorMap&)> prepare;  // the family's prepare_batch (may be empty)
};

TrainData::TrainData(const RunConfig& config, const ResolvedModel& model, const Communicator& comm,
                     const torch::Device& device)
    : impl_(std::make_unique<Impl>()) {
  const std::string& dir = config.data.dir;
  if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / "dataset.json"))
    throw Error("data.dir '" + dir + "' (" + config.source + ") holds no dataset.json; create one with `zest data synth --model " +
                model.name + " --out " + dir + " --samples N` or point data.dir at a dataset (docs/data_formats.md)");
  const ExpectedFeatures expected = model_features(model);
  DatasetOptions dataset_options;
  dataset_options.seq_len = config.data.seq_len;
  dataset_options.caption_dropout = config.data.caption_dropout;
  impl_->dataset = open_dataset(dir, dataset_options, &expected);
  impl_->items_name = dataset_format_spec(expected.format).items_name;
  impl_->fingerprint = impl_->dataset->fingerprint();
  impl_->prepare = model.family->prepare_batch;
  MemoryBudget budget = available_memory();
  if (budget.shared && comm.local_size() > 1) {  // every rank on this machine loads its own batches
    budget.bytes /= comm.local_size();
    budget.limited_by += str(", shared by ", comm.local_size(), " ranks on this machine");
  }
  check_inputs_fit(config.data, impl_->dataset->sample_bytes(), budget);
  SamplerOptions sampler;
  sampler.seed = static_cast<uint64_t>(config.train.seed);
  sampler.groups = impl_->dataset->sample_groups();  // aspect-ratio buckets: a batch holds one latent size
  sampler.group_batch = config.data.batch_size;
  LoaderOptions loader;
  loader.batch_size = config.data.batch_size;
  loader.num_workers = config.data.num_workers;
  loader.seed = static_cast<uint64_t>(config.train.seed);
  loader.pin_memory = device.is_cuda();
  impl_->loader = std::make_unique<DataLoader>(
      impl_->dataset, DistributedSampler(impl_->dataset->size(), comm.rank(), comm.size(), sampler), loader);
  impl_->prefetch = std::make_unique<DevicePrefetcher>(
      [this] {
        HostBatch host{impl_->loader->next(), 0};
        host.items = items_in(host.tensors);  // on the host batch: the step never reads the device for it
        // On the host too, before the copy to the device: the step then reads nothing on the host.
        if (impl_->prepare) impl_->prepare(host.tensors);
        return host;
      },
      device, /*depth=*/2);
}

TrainData::~TrainData() = default;

TensorMap TrainData::next() { return impl_->loader->next(); }

HostBatch TrainData::next_for_step() { return impl_->prefetch->next(); }

double TrainData::last_wait_s() const { return impl_->prefetch->last_wait_s(); }

Sample TrainData::first_sample() const { return impl_->dataset->get(0, 0); }

nlohmann::json TrainData::state() const {
  const GlobalPosition p = impl_->loader->global_state(impl_->prefetch->held());  // drawn ahead: not consumed
  return {{"epoch", p.epoch},
          {"consumed", p.consumed},
          {"dataset_size", impl_->dataset->size()},
          {"dataset_fingerprint", impl_->fingerprint}};
}

void TrainData::load_state(const JsonField& state, int saved_world_size) {
  GlobalPosition position;
  const int64_t size = impl_->dataset->size();
  position.epoch = state.at("epoch").integer(0);
  if (state.has("consumed")) {
    position.consumed = state.at("consumed").integer(0);
    const int64_t saved_size = state.at("dataset_size").integer(0);
    if (saved_size != size)
      throw Error(str("the checkpoint was trained on a dataset of ", saved_size, " samples, data.dir '",
                      impl_->dataset->dir(), "' has ", size, ": its data position means nothing here (start a "
                      "new run, or point data.dir at the run's dataset)"));
    // Checkpoints from before the fingerprint have none: their dataset is taken on trust.
    const std::string saved = state.at("dataset_fingerprint").string_or("");
    if (!saved.empty() && saved != impl_->fingerprint)
      throw Error(str("the checkpoint was trained on another dataset than data.dir '", impl_->dataset->dir(),
                      "' holds: both have ", size, " samples, but the contents differ (dataset fingerprint ",
                      printable(saved, 40), " in the checkpoint, ", impl_->fingerprint, " now), so its data position "
                      "means nothing here. Point data.dir at the run's dataset, or start a new run (--no-resume)"));
  } else {
    // The form before global positions: this rank's index in its own list; every rank was at the same one.
    const int64_t index = state.at("index").integer(0, std::numeric_limits<int64_t>::max() / std::max(1, saved_world_size));
    position.consumed = index * saved_world_size;
  }
  if (position.epoch < 0 || position.consumed < 0 || position.consumed >= impl_->loader->global_epoch_size())
    throw Error(str("the checkpoint's data position {epoch ", position.epoch, ", ", position.consumed,
                    " samples consumed} lies outside an epoch of ", size, " samples of data.dir '",
                    impl_->dataset->dir(), "' (was it made with another dataset?)"));
  impl_->prefetch->clear();
  impl_->loader->load_global_state(position);
}

std::string TrainData::items_name() const { return impl_->items_name; }

int64_t TrainData::items_in(const TensorMap& batch) const {
  return impl_->dataset->items_in(batch);
}

}  // namespace zest
