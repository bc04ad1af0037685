// DataConfig: the [data] table (dataset folder, per-rank micro-batch size, loader threads, sequence
// length, caption dropout), with its strict TOML reader and writer.
#pragma once

#include <string>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

// More loader threads than this only cost memory and start-up time (each holds whole batches).
inline constexpr int kMaxLoaderWorkers = 64;

struct DataConfig {
  std::string dir;       // dataset folder (required; relative to the working directory)
  int batch_size = 1;    // samples per rank per micro-batch (global batch = batch_size · ranks · accumulation)
  int num_workers = 2;   // background loader threads per rank; 0 = load on the training thread
  int seq_len = 0;       // frames per sample for sequence models; 0 = the dataset's own length
  // Probability that a latent sample's text condition is replaced by the empty caption's (dataset.json's
  // empty_prompt), for classifier-free guidance; seeded per sample and epoch like every loader choice.
  double caption_dropout = 0.0;

  static DataConfig from_toml(ConfigTable& table);
};

void to_toml(const DataConfig& config, ConfigWriter& out);
const FieldTable<DataConfig>& data_fields();  // the [data] table (core/field_table.h)

}  // namespace zest
