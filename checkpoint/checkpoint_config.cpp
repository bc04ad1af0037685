// CheckpointConfig: [checkpoint] TOML reader (strict) and writer.
#include "checkpoint/checkpoint_config.h"

#include "core/config_reader.h"
#include "core/config_writer.h"

#include <map>

namespace zest {

namespace {

const std::map<std::string, std::string> kCheckpointHints = {
    {"save_interval", "zest calls it every_steps"},
    {"interval", "zest calls it every_steps"},
    {"keep", "zest calls it keep_last"},
    {"folder", "zest calls it dir"},
};

}  // namespace

CheckpointConfig CheckpointConfig::from_toml(ConfigTable& table) {
  CheckpointConfig c;
  c.dir = table.get("dir", c.dir);
  c.every_steps = table.get("every_steps", c.every_steps);
  c.keep_last = table.get("keep_last", c.keep_last);
  c.async = table.get("async", c.async);
  c.merge_at_end = table.get("merge_at_end", c.merge_at_end);
  c.shared_fs = table.get("shared_fs", c.shared_fs);
  table.reject_unknown_keys(kCheckpointHints);

  if (table.has("dir") && c.dir.empty()) table.fail("dir", "must not be empty (leave it out for <run_dir>/checkpoints)");
  if (c.every_steps < 0) table.fail("every_steps", "must be >= 0 (0 = only the final checkpoint)");
  if (c.keep_last < 0) table.fail("keep_last", "must be >= 0 (0 = keep all)");
  return c;
}

void to_toml(const CheckpointConfig& c, ConfigWriter& out) {
  ConfigWriter& t = out.table("checkpoint", "sharded checkpoints (DIR/step_N/, DIR/latest)");
  t.set("dir", c.dir, "checkpoint folder");
  t.set("every_steps", c.every_steps, "save every N optimizer steps; 0 = only the final one");
  t.set("keep_last", c.keep_last, "complete checkpoints kept; 0 = all");
  t.set("async", c.async, "write shards in the background");
  t.set("merge_at_end", c.merge_at_end, "also write one consolidated model.safetensors at the end");
  t.set("shared_fs", c.shared_fs, "every node sees dir; false: each node keeps its own ranks' files");
}

}  // namespace zest
