// Activation memory of one micro-batch: what the forward keeps for the backward, per unit and per sample
// (a profile each model family computes from its own shapes), turned into bytes for a batch size and an
// activation-checkpointing policy. The pre-flight check and `zest estimate` add it to the model state.
#pragma once

#include "engine/engine_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zest {

// The shapes a profile is computed for (the data's, per sample). 0 takes the family's default (as
// SyntheticShapes: HY-Motion 360 frames and 128 text tokens, UNet 64×64 latents and 77 text tokens).
struct ActivationShapes {
  int64_t length = 0;       // motion frames, or the latent height
  int64_t width = 0;        // the latent width (0: square)
  int64_t text_tokens = 0;
  Precision precision = Precision::bf16;  // compute dtype of the activations
  // Attention that keeps its probabilities for backward (LibTorch's math path: the CPU, and 1.13):
  // heads × queries × keys floats per sample. The fused GPU kernels keep only a row statistic.
  bool attention_keeps_probabilities = true;
};

// What one unit keeps per sample: `saved` with the unit run plainly, `inputs` when it is checkpointed
// (only its inputs stay; `saved` comes back for the unit's recompute during backward).
struct UnitActivations {
  std::string name;
  double saved_bytes = 0;
  double input_bytes = 0;
};

struct ActivationProfile {
  std::vector<UnitActivations> units;  // in unit_decls() order
  double outside_bytes = 0;    // kept outside the units per sample (the loss, masks, noise)
  double workspace_bytes = 0;  // per sample: backward's transient gradients at their largest
};

// Activation bytes of one micro-batch of `batch` samples under `policy` (every: k of every_k) at their
// peak during backward: what the units before the one being differentiated keep, that unit's activations
// (recomputed when checkpointed, next to its inputs), and backward's workspace.
int64_t activation_bytes(const ActivationProfile& profile, int64_t batch, CheckpointPolicy policy, int every);

}  // namespace zest
