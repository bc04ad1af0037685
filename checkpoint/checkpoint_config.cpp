// CheckpointConfig: [checkpoint] TOML reader (strict) and writer.
#include "checkpoint/checkpoint_config.h"

#include "core/config_reader.h"
#include "core/config_writer.h"
#include "core/field_table.h"

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

const FieldTable<CheckpointConfig>& checkpoint_fields() {
  static const FieldTable<CheckpointConfig> table = [] {
    using C = CheckpointConfig;
    FieldTable<C> t("checkpoint", "sharded checkpoints (DIR/step_N/, DIR/latest)", kCheckpointHints);
    t.text("dir", &C::dir, "checkpoint folder")
        .default_text("`<run_dir>/checkpoints`")
        .reference("checkpoint folder (`DIR/step_N/`, `DIR/latest`)");
    t.integer("every_steps", &C::every_steps, "save every N optimizer steps; 0 = only the final one")
        .at_least(0, "must be >= 0 (0 = only the final checkpoint)")
        .reference("save every N optimizer steps; 0 = only the final checkpoint");
    t.integer("keep_last", &C::keep_last, "complete checkpoints kept; 0 = all")
        .at_least(0, "must be >= 0 (0 = keep all)")
        .reference("complete checkpoints kept on disk; 0 = keep all");
    t.boolean("async", &C::async, "write shards in the background")
        .reference("write shards from a background thread while training continues");
    t.boolean("merge_at_end", &C::merge_at_end, "also write one consolidated model.safetensors at the end")
        .reference("after the final step, also write one consolidated `model.safetensors`, and with `[ema]` also "
                   "`model_ema.safetensors` (the EMA, same names)");
    t.boolean("shared_fs", &C::shared_fs, "every node sees dir; false: each node keeps its own ranks' files")
        .reference("true: every node must see the same `dir` (checked at start: rank 0 writes a token there that every "
                   "rank must read; a rank that cannot is an error naming it and its host). false: each node keeps its "
                   "own ranks' files in its own `dir` (with a copy of the manifest); resuming then needs the same world "
                   "size, and `zest merge` the nodes' step folders gathered into one (README.md, \"Several machines\")");
    // Absent, the run config puts it under train.run_dir; given, it must name a folder.
    t.rules([](ConfigTable& table, C& c) {
      if (table.has("dir") && c.dir.empty()) table.fail("dir", "must not be empty (leave it out for <run_dir>/checkpoints)");
    });
    return t;
  }();
  return table;
}

CheckpointConfig CheckpointConfig::from_toml(ConfigTable& table) { return checkpoint_fields().read(table); }

void to_toml(const CheckpointConfig& c, ConfigWriter& out) { checkpoint_fields().write(c, out); }

}  // namespace zest
