// The checkpoint API the training loop uses: sharded, crash-safe saves (sync or async), exact resume at
// any world size and stage, and merging into one model file. On-disk format: docs/checkpoint_format.md.
//
//   checkpoint::Saver saver;
//   auto req = checkpoint::SaveRequest::from_config(cfg.checkpoint);  // + model_name, model_config, extra
//   if (auto latest = checkpoint::find_latest(cfg.checkpoint.dir))
//     state = checkpoint::load(engine, {*latest, model_name, model_config});
//   ... saver.poll(comm) every step; saver.save(engine, req) every N steps; saver.wait(comm) at the end;
//   checkpoint::merge_online(engine, "model.safetensors", {torch::kBFloat16});
#pragma once

// provides: find_latest, locate_checkpoint, resolve_checkpoint, step/rank file names, retention
#include "checkpoint/directory.h"
// provides: LoadRequest, LoadedState, load, check_compatibility
#include "checkpoint/load.h"
// provides: Manifest, read_manifest, config_hash
#include "checkpoint/manifest.h"
// provides: MergeOptions, merge_offline, merge_online, parse_byte_size, parse_merge_dtype
#include "checkpoint/merge.h"
// provides: SaveRequest, Saver, save
#include "checkpoint/save.h"
// provides: check_rank_file, inspect_checkpoint (what `zest ckpt inspect --verify` checks)
#include "checkpoint/verify.h"
