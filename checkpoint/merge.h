// Merging a checkpoint into one consolidated model file (the inference path), with the model's own
// state-dict names: offline from a checkpoint folder (streaming fixed-size pieces of each parameter
// from whichever rank files hold them, so memory does not grow with the model), or online at the end
// of training (rank 0 writes while the ranks gather one unit at a time). A tied parameter is written
// under each of its names, as PyTorch's state_dict() lists it; metadata "zest.aliases" records the ties.
// With `ema` the values are the EMA of the weights instead of the trained (master) weights; metadata
// "zest.weights" says which ("master" or "ema").
#pragma once

#include "checkpoint/manifest.h"
#include "engine/engine_state.h"

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zest::checkpoint {

struct MergeOptions {
  torch::Dtype dtype = torch::kFloat32;  // fp32, bf16 or fp16
  uint64_t shard_size_bytes = 0;         // 0: one file; else hub-style shards + index json
  int64_t chunk_numel = int64_t{16} << 20;  // offline: fp32 elements read per piece (64 MiB)
  std::string model_name;                // online only (offline takes it from the manifest)
  bool ema = false;                      // the EMA of the weights instead of the master weights
  // Written before every tensor name (e.g. "unet." for a LoRA file diffusers loads), and header metadata
  // added to zest's own (e.g. peft's "lora_adapter_metadata").
  std::string name_prefix;
  std::map<std::string, std::string> extra_metadata;
};

struct MergeResult {
  std::vector<std::string> files;
  std::string index_path;  // "" for a single file
  uint64_t total_bytes = 0;
  int64_t tensors = 0;
  std::vector<std::string> notes;  // offline: how the checkpoint was found, when `latest` was not followed
};

// Offline: `ckpt` is anything locate_checkpoint() accepts (a step folder, a root, DIR/latest). Refused
// before anything is written: an output inside the checkpoint (its root when it has one), an output that
// is not a regular file, an invalid manifest, a rank file that is missing, has the wrong size, or whose
// header does not match the manifest (another rank's, step's or checkpoint's file). Every rank file is
// checksummed while it is read (the optimizer state too, so each file is read once in full); a mismatch
// fails the merge before the output gets its final name.
MergeResult merge_offline(const std::string& ckpt, const std::string& out_path, const MergeOptions& options);

// With options.ema, a checkpoint without an EMA is refused before anything is written.
// Online, collective: every rank takes part in the gathers; rank 0 writes. Returns rank 0's result
// (empty on the others). With options.ema, an engine without an EMA is refused on every rank.
MergeResult merge_online(StatefulEngine& engine, const std::string& out_path, const MergeOptions& options);

// The tensor kind a merge with `options` reads from the checkpoint `manifest` describes: "master", or
// "ema" with options.ema (refused, naming `step_dir`, when the checkpoint has no EMA).
std::string merged_kind(const Manifest& manifest, const MergeOptions& options, const std::string& step_dir);

// "fp32" | "bf16" | "fp16" → dtype (error lists the choices).
torch::Dtype parse_merge_dtype(const std::string& name);
// "5GB" (10^9), "500MB", "2GiB" (2^30), "64KiB", "1024" (bytes) → bytes; "0" = no sharding.
uint64_t parse_byte_size(const std::string& text);

}  // namespace zest::checkpoint
