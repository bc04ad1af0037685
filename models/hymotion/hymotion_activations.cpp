// HY-Motion's activation profile (see hymotion_activations.h). Counts follow the forward in
// mmdit_blocks.cpp, token_refiner.cpp and layers.cpp: what each Linear, norm, activation and attention
// keeps for its backward, in tensors of [tokens, width] of the compute dtype (float32 where the reference
// computes in float32: the norms' inputs).
#include "models/hymotion/hymotion_activations.h"

#include <algorithm>

namespace zest::hymotion {
namespace {

struct Widths {
  double c = 2;     // compute dtype bytes
  double f = 4;     // float32
  double D = 0;     // feat_dim
  double H = 0;     // heads
  bool keeps_probabilities = true;
};

// Attention over `queries` × `keys` with `H` heads: q, k, v (and its output for the fused kernels), plus
// the probabilities (math path, float32, and their compute-dtype copy when that is narrower) or a row
// statistic (fused kernels).
double attention_bytes(const Widths& w, double queries, double keys) {
  const double qkv = (queries + 2 * keys) * w.D * w.c;
  if (!w.keeps_probabilities) return qkv + queries * w.D * w.c + w.H * queries * w.f;
  const double probabilities = w.H * queries * keys * (w.f + (w.c < w.f ? w.c : 0));
  return qkv + probabilities;
}

// Tensors of [L, D] (compute dtype) a block keeps: the norm's input (the unit's input) and output, the
// qkv projection (its q and k feed the per-head norms), q and k normed, the attention's output and the
// out-projection's, the residual after attention, the second norm's output and the MLP's output.
double double_block_bytes(const Widths& w, double L, double M) {
  const double rows = L * w.D * w.c;
  // Math path: q·scale, k and v (cat of the two streams); fused: see attention_bytes.
  return 12 * rows + attention_bytes(w, L, L) + 2 * L * M * w.c;
}

// The single block's linear1 output [L, 3D + M] is kept (as [q | k | v] and the MLP half, or one tensor),
// and linear2 keeps [attention | act(mlp)] of [L, D + M] (on CUDA its two products keep act(mlp) alone,
// kernels/joined_linear_op.h: there this counts L·D more than is kept).
double single_block_bytes(const Widths& w, double L, double M) {
  const double rows = L * w.D * w.c;
  const double linear1 = L * (3 * w.D + M) * w.c;
  const double linear2_input = L * (w.D + M) * w.c;
  // norm input and output, q and k normed, linear2's output; attention keeps q·scale and k (v is a view).
  return 5 * rows + linear1 + linear2_input + attention_bytes(w, L, L) - L * w.D * w.c;
}

// A refiner block over T text tokens: as the double block, its norms being affine LayerNorms.
double refiner_block_bytes(const Widths& w, double T, double M) {
  const double rows = T * w.D * w.c;
  return 10 * rows + attention_bytes(w, T, T) - rows + 2 * T * M * w.c;
}

}  // namespace

ActivationProfile activation_profile(const HyMotionConfig& config, const ActivationShapes& shapes) {
  Widths w;
  w.c = shapes.precision == Precision::fp32 ? 4 : 2;
  w.D = static_cast<double>(config.feat_dim);
  w.H = static_cast<double>(config.num_heads);
  w.keeps_probabilities = shapes.attention_keeps_probabilities;
  const double S = static_cast<double>(shapes.length > 0 ? shapes.length : 360);
  const double T = static_cast<double>(shapes.text_tokens > 0 ? shapes.text_tokens : 128);
  const double L = S + T;
  const double M = static_cast<double>(config.mlp_hidden());
  const double unit_input = L * w.D * w.c;  // a block's residual stream

  ActivationProfile profile;
  // The encoders keep their float32 inputs (the batch's, counted outside), or copies in a narrower
  // compute dtype.
  const double inputs = (S * static_cast<double>(config.input_dim) + T * static_cast<double>(config.ctxt_input_dim));
  profile.units.push_back({"embed", w.c < w.f ? inputs * w.c : 0.0, 0.0});
  if (config.refiner.enabled) {
    const double Mr = static_cast<double>(config.refiner_mlp_hidden());
    const double refiner = static_cast<double>(config.refiner.num_layers) * refiner_block_bytes(w, T, Mr) + T * w.D * w.c;
    profile.units.push_back({"text_refiner", refiner, T * w.D * w.c});
  }
  for (int64_t i = 0; i < config.num_double_blocks(); ++i)
    profile.units.push_back({"double_blocks." + std::to_string(i), double_block_bytes(w, L, M), unit_input});
  for (int64_t i = 0; i < config.num_single_blocks(); ++i)
    profile.units.push_back({"single_blocks." + std::to_string(i), single_block_bytes(w, L, M), unit_input});
  // The final layer's norm keeps its input's whole [L, D] storage (it reads the motion rows of it).
  profile.units.push_back({"final_layer", unit_input + S * w.D * w.c, unit_input});
  // Outside the units: the batch (float32 motion and text features, masks), the attention bias ([L, L] in
  // the compute dtype, one for every block; the refiner's [T, T] in float32), the noise, x_t, the target and
  // the loss's terms (float32 [S, input_dim]).
  profile.outside_bytes = inputs * w.f + L * L * w.c + T * T * w.f + 6 * S * static_cast<double>(config.input_dim) * w.f;
  // Backward's largest transient: the gradients of the probabilities and of the scores, and one
  // gradient of the MLP's width (the MLP's own saved tensors are gone by the time attention's come).
  profile.workspace_bytes = (w.keeps_probabilities ? 2 * w.H * L * L * w.f : 0) + L * std::max(M, 3 * w.D) * w.c;
  return profile;
}

}  // namespace zest::hymotion
