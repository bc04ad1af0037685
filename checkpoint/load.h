// Loading checkpoints into an engine of any world size and stage: the manifest is checked against the
// model (differences listed), rank files against their sizes and checksums, then every rank reads just
// the byte ranges of its own slices (re-sliced by parameter name from the manifest's offsets) into
// staging buffers, and only when all ranks succeeded is the engine's state replaced. The EMA of the
// weights is loaded when both the checkpoint and the engine have one; a saved EMA is left unread by an
// engine without [ema], and an engine with [ema] resuming a checkpoint without one restarts its EMA from
// the loaded weights (each case with a note).
#pragma once

#include "checkpoint/manifest.h"
#include "engine/engine_state.h"

#include <string>
#include <vector>

namespace zest::checkpoint {

struct LoadRequest {
  std::string path;          // a step folder, or a checkpoint root (then its latest checkpoint)
  std::string model_name;    // expected identity: must equal the manifest's
  std::string model_config;  // expected configuration text: must be equivalent to the manifest's
  bool verify_checksums = true;  // hash every rank file (each rank hashes a share) before loading
};

struct LoadedState {
  std::string path;           // the step folder loaded
  std::string manifest_path;  // its manifest.json (for messages about fields of `extra`)
  int64_t step = 0;
  int saved_world_size = 1;
  int saved_stage = 0;
  std::string extra_json;       // the caller's object saved with the checkpoint (data position, ...)
  std::string rank_extra_json;  // this rank's object; "" when the world size changed
  std::vector<std::string> notes;  // differences that do not prevent loading (hyper-parameters)
};

// Collective. Throws zest::Error on every rank, with the engine untouched, when the checkpoint does not
// fit (model, parameters, optimizer kind), the manifest is invalid (parse_manifest), a file is missing,
// truncated, corrupt or does not match the manifest (another rank's or step's), or the format version
// is unknown. Otherwise replaces the engine's state (StatefulEngine::load_state).
LoadedState load(StatefulEngine& engine, const LoadRequest& request);

// The mismatches that make `manifest` unloadable into an engine of `state` given the expected identity
// (empty when it fits), and the differences that do not (notes): the settings the checkpoint records
// (optimizer, scheduler, precision, EMA) compared key by key as TOML, each difference a note; another
// optimizer is an error (its state cannot be converted). Pure: no collective, no I/O.
struct Compatibility {
  std::vector<std::string> errors;
  std::vector<std::string> notes;
};
Compatibility check_compatibility(const Manifest& manifest, const EngineState& state, const LoadRequest& request);

}  // namespace zest::checkpoint
