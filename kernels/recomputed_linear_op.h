// linear_of_recomputed(f, a, b, W, bias) = linear(f(a[, b]), W, bias) for an activation f that costs less
// to recompute than to keep: the MLP's GELU before its second Linear, the UNet's GEGLU before the
// feed-forward's output Linear (HY-Motion's [attention | GELU(MLP half)] before linear2 is joined_linear_op.h's,
// which recomputes it only when asked to). Autograd would
// keep f's output (the next Linear's input, the widest activation of the block) until backward; here
// only f's inputs are kept — which their producers keep anyway — and backward runs f again before the
// Linear's weight gradient (accumulated into its .grad slot as linear_op.h does). The same kernels run
// either way, so values and gradients are the unfused ones. CUDA, 16-bit, training only; elsewhere (and
// with ZEST_RECOMPUTE_ACTIVATIONS=0, or a list without f) the plain composition.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace zest {

enum class RecomputedActivation {
  gelu,              // f(a) = GELU(a), erf form
  gelu_tanh,         // f(a) = GELU(a), tanh approximation
  silu,              // f(a) = SiLU(a)
  geglu,             // f(a) = geglu(a) (geglu_op.h)
  concat_gelu_tanh,  // f(a, b) = [a | GELU_tanh(b)] (concat_gelu_op.h)
};

// b only for concat_gelu_tanh. activated: f(a) where a GELU epilogue already made it with a
// (split_linear_with_gelu_of_last, gelu_tanh only), else undefined: forward then runs no f of its own and
// backward takes a's gradient from the product dY·W with the GELU-backward epilogue (gelu_epilogue_gemm.h),
// rounded once rather than bitwise the composition's.
torch::Tensor linear_of_recomputed(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b,
                                   const torch::Tensor& weight, const torch::Tensor& bias,
                                   const torch::Tensor& activated = {});

// f itself, as the unfused path runs it.
torch::Tensor apply_activation(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b);

// Whether linear_of_recomputed recomputes f for these arguments (recomputes_here(f), the accumulating path).
bool uses_recomputed_linear(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& weight,
                            const torch::Tensor& bias);

// Which activations are recomputed rather than kept, process-wide: ZEST_RECOMPUTE_ACTIVATIONS unset or empty:
// every kind but concat_gelu_tanh (HY-Motion's single-block GELU, cheaper kept: joined_linear_op.h); "1":
// every kind; "0": none; otherwise a comma-separated list of the kinds to recompute (gelu, gelu_tanh, silu,
// geglu, concat_gelu_tanh) — a memory-for-speed choice per kind, for tests and A/B runs.
bool activation_recompute_enabled(RecomputedActivation f);
void set_activation_recompute(RecomputedActivation f, bool enabled);
void set_activation_recompute(bool enabled);  // every kind

// Whether f is recomputed at this point: its kind is on, and this is not a checkpointed unit's own recompute
// (engine/activation_checkpoint.h), whose activations live only until the unit's backward that follows at
// once — there keeping f's output costs no peak memory and saves running f twice (with every HY-Motion 1B
// unit recomputed: 182.3 → 179.5 ms at the same peak, bench/RESULTS.md, 2026-12-03).
bool recomputes_here(RecomputedActivation f);

// The set a ZEST_RECOMPUTE_ACTIVATIONS value names, as a bit per kind (1 << kind); throws a zest::Error
// naming the variable and the accepted values for anything else.
uint32_t parse_recomputed_activations(const std::string& value);

}  // namespace zest
