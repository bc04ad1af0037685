// DataConfig: [data] TOML reader (strict) and writer.
#include "data/data_config.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"

#include <map>

namespace zest {

namespace {

const std::map<std::string, std::string> kDataHints = {
    {"train_micro_batch_size_per_gpu", "zest calls it batch_size (per rank, per micro-batch)"},
    {"micro_batch_size", "zest calls it batch_size (per rank, per micro-batch)"},
    {"path", "zest calls it dir"},
};

}  // namespace

const FieldTable<DataConfig>& data_fields() {
  static const FieldTable<DataConfig> table = [] {
    using C = DataConfig;
    FieldTable<C> t("data", "training data", kDataHints);
    t.required_text("dir", &C::dir, "dataset folder").check_value([](const std::string& d) { return !d.empty(); }, "must not be empty");
    t.integer("batch_size", &C::batch_size, "samples per rank per micro-batch")
        .at_least(1, "must be >= 1 (samples per rank per micro-batch)")
        .reference("samples per rank per micro-batch; global batch = batch_size × ranks × accumulation_steps");
    t.integer("num_workers", &C::num_workers, "loader threads per rank")
        .between(0, kMaxLoaderWorkers,
                 "must be between 0 and " + std::to_string(kMaxLoaderWorkers) +
                     " (loader threads per rank; each builds whole batches ahead, so a few keep a step fed)")
        .reference("loader threads per rank (0 = load on the training thread)");
    t.integer("seq_len", &C::seq_len, "frames per sample; 0 = the dataset's own length")
        .at_least(0, "must be >= 0 (0 = the dataset's own length)")
        .reference("frames per sample for sequence models; 0 = the dataset's longest clip");
    t.number("caption_dropout", &C::caption_dropout, "probability of the empty caption")
        .between(0, 1, "must be between 0 and 1 (the probability of training a sample on the empty caption)")
        .written_when([](const C& c) { return c.caption_dropout > 0; })
        .reference("probability that a latent sample's text condition is the empty caption's (dataset.json's "
                   "`empty_prompt`), for classifier-free guidance (diffusers' `--proportion_empty_prompts`); seeded "
                   "per sample and epoch");
    return t;
  }();
  return table;
}

DataConfig DataConfig::from_toml(ConfigTable& table) { return data_fields().read(table); }

void to_toml(const DataConfig& c, ConfigWriter& out) { data_fields().write(c, out); }

}  // namespace zest
