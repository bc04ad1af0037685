// CheckpointConfig: the [checkpoint] table (where, how often, how many kept, async writing, merged
// model at the end), with its strict TOML reader and writer.
#pragma once

#include <string>

namespace zest {

class ConfigTable;   // core/config_reader.h
class ConfigWriter;  // core/config_writer.h
template <typename C>
class FieldTable;  // core/field_table.h

struct CheckpointConfig {
  std::string dir;            // checkpoint folder; "" = <train.run_dir>/checkpoints (resolved by the run config)
  int every_steps = 0;        // save every N optimizer steps; 0 = only the final checkpoint
  int keep_last = 3;          // complete checkpoints kept on disk; 0 = keep all
  bool async = false;         // write shards from a background thread while training continues
  bool merge_at_end = true;   // after the final step, also write one consolidated model.safetensors
  // false: the nodes need not share `dir`; each node keeps its own ranks' files there (and a copy of
  // the manifest); resuming needs the same world size, merging the folders gathered into one.
  bool shared_fs = true;

  static CheckpointConfig from_toml(ConfigTable& table);
};

void to_toml(const CheckpointConfig& config, ConfigWriter& out);
const FieldTable<CheckpointConfig>& checkpoint_fields();  // the [checkpoint] table (core/field_table.h)

}  // namespace zest
