// DataConfig: [data] TOML reader (strict) and writer.
#include "data/data_config.h"

#include "core/config_reader.h"
#include "core/config_writer.h"

#include <map>

namespace zest {

namespace {

const std::map<std::string, std::string> kDataHints = {
    {"train_micro_batch_size_per_gpu", "zest calls it batch_size (per rank, per micro-batch)"},
    {"micro_batch_size", "zest calls it batch_size (per rank, per micro-batch)"},
    {"path", "zest calls it dir"},
};

void check(ConfigTable& table, bool ok, const std::string& key, const std::string& message) {
  if (!ok) table.fail(key, message);
}

}  // namespace

DataConfig DataConfig::from_toml(ConfigTable& table) {
  DataConfig c;
  c.dir = table.required<std::string>("dir");
  c.batch_size = table.get("batch_size", c.batch_size);
  c.num_workers = table.get("num_workers", c.num_workers);
  c.seq_len = table.get("seq_len", c.seq_len);
  c.caption_dropout = table.get("caption_dropout", c.caption_dropout);
  table.reject_unknown_keys(kDataHints);

  check(table, !c.dir.empty(), "dir", "must not be empty");
  check(table, c.batch_size >= 1, "batch_size", "must be >= 1 (samples per rank per micro-batch)");
  check(table, c.num_workers >= 0 && c.num_workers <= kMaxLoaderWorkers, "num_workers",
        "must be between 0 and " + std::to_string(kMaxLoaderWorkers) +
            " (loader threads per rank; each builds whole batches ahead, so a few keep a step fed)");
  check(table, c.seq_len >= 0, "seq_len", "must be >= 0 (0 = the dataset's own length)");
  check(table, c.caption_dropout >= 0.0 && c.caption_dropout <= 1.0, "caption_dropout",
        "must be between 0 and 1 (the probability of training a sample on the empty caption)");
  return c;
}

void to_toml(const DataConfig& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("data", "training data");
  t.set("dir", c.dir, "dataset folder");
  t.set("batch_size", c.batch_size, "samples per rank per micro-batch");
  t.set("num_workers", c.num_workers, "loader threads per rank");
  t.set("seq_len", c.seq_len, "frames per sample; 0 = the dataset's own length");
  if (c.caption_dropout > 0) t.set("caption_dropout", c.caption_dropout, "probability of the empty caption");
}

}  // namespace zest
