// linear_of_recomputed and its switch (see recomputed_linear_op.h); the CUDA autograd function is in
// recomputed_linear_cuda.cpp.
#include "kernels/recomputed_linear_op.h"

#include "core/check.h"
#include "engine/activation_checkpoint.h"
#include "kernels/concat_gelu_op.h"
#include "kernels/geglu_op.h"
#include "kernels/linear_op.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <iterator>
#include <sstream>

namespace zest {

#ifdef ZEST_WITH_CUDA
torch::Tensor recomputed_linear_cuda(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b,
                                     const torch::Tensor& weight, const torch::Tensor& bias,
                                     const torch::Tensor& activated);
#endif

namespace {

constexpr RecomputedActivation kKinds[] = {RecomputedActivation::gelu, RecomputedActivation::gelu_tanh,
                                           RecomputedActivation::silu, RecomputedActivation::geglu,
                                           RecomputedActivation::concat_gelu_tanh};
constexpr const char* kKindNames[] = {"gelu", "gelu_tanh", "silu", "geglu", "concat_gelu_tanh"};
constexpr uint32_t kEveryKind = (1u << std::size(kKinds)) - 1;

constexpr uint32_t bit(RecomputedActivation f) { return 1u << static_cast<uint32_t>(f); }

// HY-Motion's single-block GELU is kept: its two products (joined_linear_op.h) keep only the GELU output,
// and keeping it is 1.6 ms faster per HY-Motion 1B step at 32 × 360 frames for 2.6 GiB, still under the
// peer's peak (bench/RESULTS.md, 2026-12-03).
constexpr uint32_t kDefaultKinds = kEveryKind & ~bit(RecomputedActivation::concat_gelu_tanh);

std::atomic<uint32_t>& recomputed_set() {
  static std::atomic<uint32_t> set = [] {
    const char* value = std::getenv("ZEST_RECOMPUTE_ACTIVATIONS");
    return value == nullptr ? kDefaultKinds : parse_recomputed_activations(value);
  }();
  return set;
}

}  // namespace

uint32_t parse_recomputed_activations(const std::string& value) {
  if (value.empty()) return kDefaultKinds;
  if (value == "1") return kEveryKind;
  if (value == "0") return 0;
  uint32_t set = 0;
  std::stringstream items(value);
  for (std::string item; std::getline(items, item, ',');) {
    const auto* name = std::find(std::begin(kKindNames), std::end(kKindNames), item);
    if (name == std::end(kKindNames)) {
      std::string kinds;
      for (const char* kind : kKindNames) kinds += (kinds.empty() ? "" : ", ") + std::string(kind);
      throw Error(str("ZEST_RECOMPUTE_ACTIVATIONS=", value, ": unknown activation \"", item,
                      "\"; expected 0, 1 or a comma-separated list of ", kinds));
    }
    set |= bit(kKinds[name - std::begin(kKindNames)]);
  }
  return set;
}

bool activation_recompute_enabled(RecomputedActivation f) { return (recomputed_set().load() & bit(f)) != 0; }

void set_activation_recompute(RecomputedActivation f, bool enabled) {
  if (enabled) {
    recomputed_set().fetch_or(bit(f));
  } else {
    recomputed_set().fetch_and(~bit(f));
  }
}

void set_activation_recompute(bool enabled) { recomputed_set().store(enabled ? kEveryKind : 0); }

bool recomputes_here(RecomputedActivation f) { return activation_recompute_enabled(f) && !is_recomputing(); }

torch::Tensor apply_activation(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b) {
  switch (f) {
    case RecomputedActivation::gelu: return torch::gelu(a);
    case RecomputedActivation::gelu_tanh: return torch::gelu(a, "tanh");
    case RecomputedActivation::silu: return torch::silu(a);
    case RecomputedActivation::geglu: return geglu(a);
    case RecomputedActivation::concat_gelu_tanh: return concat_gelu_tanh(a, b);
  }
  ZEST_FAIL("unknown activation");
}

bool uses_recomputed_linear(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& weight,
                            const torch::Tensor& bias) {
  return recomputes_here(f) && accumulates_weight_grads(weight, bias) &&
         a.scalar_type() == weight.scalar_type() && a.device() == weight.device() && a.dim() >= 2 && a.numel() > 0;
}

torch::Tensor linear_of_recomputed(RecomputedActivation f, const torch::Tensor& a, const torch::Tensor& b,
                                   const torch::Tensor& weight, const torch::Tensor& bias,
                                   [[maybe_unused]] const torch::Tensor& activated) {
#ifdef ZEST_WITH_CUDA
  if (uses_recomputed_linear(f, a, weight, bias)) return recomputed_linear_cuda(f, a, b, weight, bias, activated);
#endif
  return linear(apply_activation(f, a, b), weight, bias);
}

}  // namespace zest
