// The accumulating linear (kernels/linear_op.h) on the GPU: its weight and bias gradients land in
// float32 .grad slots as float32 sums of the micro-steps' products (closer to the float64 truth than
// autograd's rounding of each micro-step's 16-bit gradient), dX equals ATen's bitwise, it falls back to
// returning gradients where no slot exists, and the engine trains the same with and without it at every
// stage, with accumulation, on 1 and 2 GPUs (the fused path taken by every backward). linear_of_recomputed
// gives the composition's values and input gradients bitwise while keeping less for backward;
// joined_gelu_linear gives the concatenated product's values and gradients as two products;
// shared_input_linear gives the layers' own values and gradients with dX added in one buffer; linear_plus gives
// the product-then-add's with the residual added in the product; inside a checkpointed unit's recompute the
// activation is kept.
#include "common/scoped_switch.h"
#include "common/tensor_close.h"
#include "comm/world.h"
#include "engine/activation_checkpoint.h"
#include "engine/engine.h"
#include "kernels/fused_paths.h"
#include "kernels/joined_linear_op.h"
#include "kernels/linear_op.h"
#include "kernels/recomputed_linear_op.h"
#include "kernels/residual_linear_op.h"
#include "kernels/shared_input_linear_op.h"
#include "kernels/split_linear_op.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <gtest/gtest.h>

#include <map>

namespace zest::testing {
namespace {

ScopedSwitch fusion_switch(bool on) { return {linear_grad_fusion_enabled, set_linear_grad_fusion, on}; }

struct Grads {
  torch::Tensor dx, dweight, dbias;
};

// Two micro-steps of y = linear(x, W, b), loss Σ y·r, with .grad slots of slot_dtype set beforehand (as
// the engine does) when `slots`, else autograd's own .grad.
Grads two_micro_steps(torch::ScalarType dtype, bool fused, bool slots, bool strided_input,
                      torch::ScalarType slot_dtype = torch::kFloat32) {
  const auto fusion = fusion_switch(fused);
  torch::manual_seed(11);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  auto weight = (torch::randn({80, 96}, cuda) * 0.1).to(dtype).requires_grad_(true);
  auto bias = (torch::randn({80}, cuda) * 0.1).to(dtype).requires_grad_(true);
  if (slots) {
    // Views of one flat buffer, as the engine's slots are.
    const auto flat = torch::zeros({80 * 96 + 80}, cuda.dtype(slot_dtype));
    weight.mutable_grad() = flat.narrow(0, 0, 80 * 96).view({80, 96});
    bias.mutable_grad() = flat.narrow(0, 80 * 96, 80);
  }
  torch::Tensor last_dx;
  for (int micro = 0; micro < 2; ++micro) {
    auto base = torch::randn({3, strided_input ? 45 : 37, 96}, cuda).to(dtype);
    // Strided: a leaf viewing 37 of 45 positions, so the product's input is not contiguous.
    const auto x = (strided_input ? base.narrow(1, 4, 37) : base).detach().requires_grad_(true);
    EXPECT_EQ(uses_accumulating_linear(x, weight, bias), fused);
    const auto r = torch::randn({3, 37, 80}, cuda).to(dtype);
    (linear(x, weight, bias).to(torch::kFloat32) * r).sum().backward();
    last_dx = x.grad();
  }
  return {last_dx, weight.grad(), bias.grad()};
}

TEST(GpuAccumulatingLinear, SlotsGetFloat32SumsOfTheMicroSteps) {
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    for (const bool strided : {false, true}) {
      const auto before = linear_grad_fusion_counts();
      const Grads fused = two_micro_steps(dtype, /*fused=*/true, /*slots=*/true, strided);
      const auto after = linear_grad_fusion_counts();
      EXPECT_EQ(after.fused - before.fused, 2) << "both backwards accumulated into the slots";
      const Grads plain = two_micro_steps(dtype, /*fused=*/false, /*slots=*/true, strided);
      // The truth: the same 16-bit operands, products and sums in float64.
      torch::manual_seed(11);
      const auto cuda = torch::TensorOptions().device(torch::kCUDA);
      const auto weight = (torch::randn({80, 96}, cuda) * 0.1).to(dtype);
      (void)(torch::randn({80}, cuda) * 0.1);
      torch::Tensor dweight = torch::zeros({80, 96}, cuda.dtype(torch::kFloat64));
      torch::Tensor dbias = torch::zeros({80}, cuda.dtype(torch::kFloat64));
      for (int micro = 0; micro < 2; ++micro) {
        auto base = torch::randn({3, strided ? 45 : 37, 96}, cuda).to(dtype);
        const auto x = (strided ? base.narrow(1, 4, 37) : base).reshape({-1, 96}).to(torch::kFloat64);
        const auto r = torch::randn({3, 37, 80}, cuda).to(dtype).reshape({-1, 80}).to(torch::kFloat64);
        dweight += r.t().mm(x);
        dbias += r.sum(0);
      }
      EXPECT_EQ(fused.dweight.scalar_type(), torch::kFloat32);
      EXPECT_LT(relative_l2_error(fused.dweight, dweight), 1e-5) << "float32 accumulation of exact 16-bit products";
      EXPECT_LT(relative_l2_error(fused.dbias, dbias), 1e-5);
      EXPECT_LT(relative_l2_error(plain.dweight, dweight), 1e-2) << "the unfused path rounds each micro-step";
      EXPECT_GT(relative_l2_error(plain.dweight, dweight), relative_l2_error(fused.dweight, dweight));
      EXPECT_TRUE(torch::equal(fused.dx, plain.dx)) << "dX is ATen's product either way";
    }
  }
}

// engine.reduce_dtype = the compute dtype: the slots are 16-bit, cuBLAS still accumulates in float32 and
// rounds once per micro-step into the slot, as autograd's 16-bit accumulation does.
TEST(GpuAccumulatingLinear, SixteenBitSlotsAccumulateInTheirOwnDtype) {
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    const auto before = linear_grad_fusion_counts();
    const Grads fused = two_micro_steps(dtype, /*fused=*/true, /*slots=*/true, false, dtype);
    EXPECT_EQ(linear_grad_fusion_counts().fused - before.fused, 2) << "both backwards used the 16-bit slots";
    const Grads plain = two_micro_steps(dtype, /*fused=*/false, /*slots=*/true, false, dtype);
    const Grads wide = two_micro_steps(dtype, /*fused=*/true, /*slots=*/true, false);
    EXPECT_EQ(fused.dweight.scalar_type(), dtype);
    EXPECT_EQ(fused.dbias.scalar_type(), dtype);
    const auto want_w = wide.dweight.to(torch::kFloat64), want_b = wide.dbias.to(torch::kFloat64);
    // One 16-bit rounding per micro-step (2^-8 relative for bf16), like autograd's own 16-bit sums.
    const double tolerance = dtype == torch::kBFloat16 ? 8e-3 : 1e-3;
    EXPECT_LT(relative_l2_error(fused.dweight, want_w), tolerance);
    EXPECT_LT(relative_l2_error(fused.dbias, want_b), tolerance);
    EXPECT_LT(relative_l2_error(plain.dweight, want_w), tolerance);
    EXPECT_GT(relative_l2_error(fused.dweight, want_w), 0.0) << "the slot really is 16-bit";
    EXPECT_TRUE(torch::equal(fused.dx, plain.dx));
  }
}

// Also on the second micro-step, where autograd's own 16-bit .grad exists: that is not an engine slot.
TEST(GpuAccumulatingLinear, WithoutSlotsItReturnsAutogradsGradients) {
  const auto before = linear_grad_fusion_counts();
  const Grads fused = two_micro_steps(torch::kBFloat16, /*fused=*/true, /*slots=*/false, false);
  EXPECT_EQ(linear_grad_fusion_counts().unfused - before.unfused, 2);
  const Grads plain = two_micro_steps(torch::kBFloat16, /*fused=*/false, /*slots=*/false, false);
  EXPECT_EQ(fused.dweight.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(fused.dweight, plain.dweight));
  EXPECT_TRUE(torch::equal(fused.dbias, plain.dbias));
  EXPECT_TRUE(torch::equal(fused.dx, plain.dx));
}

TEST(GpuAccumulatingLinear, Float32AndFrozenWeightsTakeTorchLinear) {
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto x = torch::randn({4, 8}, cuda).to(torch::kBFloat16);
  const auto w32 = torch::randn({3, 8}, cuda).requires_grad_(true);
  EXPECT_FALSE(uses_accumulating_linear(x.to(torch::kFloat32), w32, {}));
  const auto frozen = torch::randn({3, 8}, cuda).to(torch::kBFloat16);
  EXPECT_FALSE(uses_accumulating_linear(x, frozen, {}));
  const auto w16 = frozen.clone().requires_grad_(true);
  EXPECT_TRUE(uses_accumulating_linear(x, w16, {}));
  torch::NoGradGuard no_grad;
  EXPECT_FALSE(uses_accumulating_linear(x, w16, {}));
}

// Σ outputᵢ·rᵢ over the outputs `used`, one random rᵢ drawn for every output (used or not, so that the draws
// do not depend on which are used), in float32.
torch::Tensor loss_over_used(const std::vector<torch::Tensor>& outputs, const std::vector<bool>& used) {
  auto loss = torch::zeros({}, outputs.front().options().dtype(torch::kFloat32));
  for (size_t i = 0; i < outputs.size(); ++i) {
    const auto r = torch::randn(outputs[i].sizes(), outputs[i].options().dtype(torch::kFloat32));
    if (used[i]) loss = loss + (outputs[i].to(torch::kFloat32) * r).sum();
  }
  return loss;
}

struct SplitRun {
  std::vector<torch::Tensor> parts;
  torch::Tensor dx, dweight, dbias;
};

// parts = split_linear(x, W, b, {48, 32}) (or linear + split when !split), loss Σ partᵢ·rᵢ over the parts
// `used`, float32 slots when `slots`.
SplitRun run_split(bool split, bool slots, std::vector<bool> used = {true, true}) {
  const ScopedSwitch sw(split_linear_enabled, set_split_linear, split);
  torch::manual_seed(13);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  auto weight = (torch::randn({80, 96}, cuda) * 0.1).to(torch::kBFloat16).requires_grad_(true);
  auto bias = (torch::randn({80}, cuda) * 0.1).to(torch::kBFloat16).requires_grad_(true);
  if (slots) {
    const auto flat = torch::zeros({80 * 96 + 80}, cuda);
    weight.mutable_grad() = flat.narrow(0, 0, 80 * 96).view({80, 96});
    bias.mutable_grad() = flat.narrow(0, 80 * 96, 80);
  }
  const auto x = torch::randn({3, 37, 96}, cuda).to(torch::kBFloat16).requires_grad_(true);
  SplitRun run;
  run.parts = split_linear(x, weight, bias, {48, 32});
  EXPECT_EQ(run.parts.size(), 2u);
  loss_over_used(run.parts, used).backward();
  run.dx = x.grad();
  run.dweight = weight.grad();
  run.dbias = bias.grad();
  return run;
}

TEST(GpuSplitLinear, PartsAndGradientsAreThoseOfTheWholeProduct) {
  const auto before = linear_grad_fusion_counts();
  const SplitRun split = run_split(true, true);
  EXPECT_EQ(linear_grad_fusion_counts().fused - before.fused, 1) << "one backward into the slots";
  const SplitRun whole = run_split(false, true);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_TRUE(split.parts[i].is_contiguous()) << "each part is its own tensor";
    EXPECT_LT(relative_l2_error(split.parts[i], whole.parts[i].to(torch::kFloat64)), 4e-3) << i;
  }
  // The slots hold float32 sums of the same products either way; dX rounds the first part's product to
  // bf16 before the second accumulates onto it.
  EXPECT_LT(relative_l2_error(split.dweight, whole.dweight.to(torch::kFloat64)), 1e-5);
  EXPECT_LT(relative_l2_error(split.dbias, whole.dbias.to(torch::kFloat64)), 1e-5);
  EXPECT_LT(relative_l2_error(split.dx, whole.dx.to(torch::kFloat64)), 8e-3);

  // Without slots the gradients are returned, in the weights' dtype, as autograd's.
  const SplitRun split_plain = run_split(true, false);
  const SplitRun whole_plain = run_split(false, false);
  EXPECT_EQ(split_plain.dweight.scalar_type(), torch::kBFloat16);
  EXPECT_LT(relative_l2_error(split_plain.dweight, whole_plain.dweight.to(torch::kFloat64)), 8e-3);
  EXPECT_LT(relative_l2_error(split_plain.dbias, whole_plain.dbias.to(torch::kFloat64)), 8e-3);

  // A part nothing uses gets no gradient; the other part's rows are the whole product's.
  const SplitRun first_only = run_split(true, true, {true, false});
  const SplitRun whole_first = run_split(false, true, {true, false});
  EXPECT_EQ(first_only.dweight.narrow(0, 48, 32).abs().max().item<float>(), 0.0f);
  EXPECT_EQ(first_only.dbias.narrow(0, 48, 32).abs().max().item<float>(), 0.0f);
  EXPECT_LT(relative_l2_error(first_only.dweight, whole_first.dweight.to(torch::kFloat64)), 1e-5);
  EXPECT_LT(relative_l2_error(first_only.dx, whole_first.dx.to(torch::kFloat64)), 8e-3);
}

struct SharedInputRun {
  std::vector<torch::Tensor> outputs, dweights;
  torch::Tensor dx, dbias;  // dbias: the second layer's (the others have none)
};

// Three layers of widths 48, 32, 64 over one x [3, 37, 96] (the second with a bias), float32 slots when `slots`,
// loss Σ outputᵢ·rᵢ over the layers `used`; shared_input_linear, or each layer's linear when !shared.
SharedInputRun run_shared_input(bool shared, bool slots, std::vector<bool> used = {true, true, true}) {
  const ScopedSwitch sw(shared_input_linear_enabled, set_shared_input_linear, shared);
  torch::manual_seed(17);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  std::vector<torch::Tensor> weights, biases(3);
  for (const int64_t out : {48, 32, 64}) {
    weights.push_back((torch::randn({out, 96}, cuda) * 0.1).to(torch::kBFloat16).requires_grad_(true));
  }
  biases[1] = (torch::randn({32}, cuda) * 0.1).to(torch::kBFloat16).requires_grad_(true);
  if (slots) {
    for (auto& w : weights) w.mutable_grad() = torch::zeros(w.sizes(), cuda);
    biases[1].mutable_grad() = torch::zeros({32}, cuda);
  }
  const auto x = torch::randn({3, 37, 96}, cuda).to(torch::kBFloat16).requires_grad_(true);
  EXPECT_EQ(uses_shared_input_linear(x, weights, biases), shared);
  SharedInputRun run;
  run.outputs = shared_input_linear(x, weights, biases);
  loss_over_used(run.outputs, used).backward();
  run.dx = x.grad();
  for (const auto& w : weights) run.dweights.push_back(w.grad());
  run.dbias = biases[1].grad();
  return run;
}

// The layers over one input give each layer's output and gradients, with dX added in one buffer.
TEST(GpuSharedInputLinear, OutputsAndGradientsAreThoseOfTheLayersOneByOne) {
  const auto before = linear_grad_fusion_counts();
  const SharedInputRun shared = run_shared_input(true, true);
  EXPECT_EQ(linear_grad_fusion_counts().fused - before.fused, 3) << "each layer's backward into its slots";
  const SharedInputRun apart = run_shared_input(false, true);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(shared.outputs[i].equal(apart.outputs[i])) << "the same product, layer " << i;
    EXPECT_LT(relative_l2_error(shared.dweights[i], apart.dweights[i].to(torch::kFloat64)), 1e-5) << i;
  }
  EXPECT_LT(relative_l2_error(shared.dbias, apart.dbias.to(torch::kFloat64)), 1e-5);
  // Autograd rounds each layer's dX to bf16 before adding; the shared buffer rounds after each product.
  EXPECT_LT(relative_l2_error(shared.dx, apart.dx.to(torch::kFloat64)), 8e-3);

  // Without slots the gradients are returned, in the weights' dtype.
  const SharedInputRun shared_plain = run_shared_input(true, false);
  const SharedInputRun apart_plain = run_shared_input(false, false);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(shared_plain.dweights[i].scalar_type(), torch::kBFloat16);
    EXPECT_LT(relative_l2_error(shared_plain.dweights[i], apart_plain.dweights[i].to(torch::kFloat64)), 8e-3) << i;
  }
  EXPECT_LT(relative_l2_error(shared_plain.dbias, apart_plain.dbias.to(torch::kFloat64)), 8e-3);

  // A layer nothing uses gets no gradient; dX is the other layers'.
  const SharedInputRun two = run_shared_input(true, true, {true, false, true});
  const SharedInputRun two_apart = run_shared_input(false, true, {true, false, true});
  EXPECT_EQ(two.dweights[1].abs().max().item<float>(), 0.0f);
  EXPECT_EQ(two.dbias.abs().max().item<float>(), 0.0f);
  EXPECT_LT(relative_l2_error(two.dx, two_apart.dx.to(torch::kFloat64)), 8e-3);
}

struct PlusRun {
  torch::Tensor y, dx, dweight, dbias, dresidual;
};

// y = linear_plus(x, W, b, residual) with the sum in the product (`fused`) or as linear() and an add, loss Σ y·r,
// float32 slots.
PlusRun run_linear_plus(bool fused, bool with_bias) {
  const ScopedSwitch sw(residual_epilogue_enabled, set_residual_epilogue, fused);
  torch::manual_seed(19);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  auto weight = (torch::randn({80, 96}, cuda) * 0.1).to(torch::kBFloat16).requires_grad_(true);
  weight.mutable_grad() = torch::zeros({80, 96}, cuda);
  torch::Tensor bias;
  if (with_bias) {
    bias = (torch::randn({80}, cuda) * 0.1).to(torch::kBFloat16).requires_grad_(true);
    bias.mutable_grad() = torch::zeros({80}, cuda);
  }
  const auto x = torch::randn({3, 37, 96}, cuda).to(torch::kBFloat16).requires_grad_(true);
  const auto residual = (torch::randn({3, 37, 80}, cuda) * 2).to(torch::kBFloat16).requires_grad_(true);
  EXPECT_EQ(uses_residual_epilogue(x, weight, bias, residual), fused);
  reset_fused_path_uses();
  PlusRun run;
  run.y = linear_plus(x, weight, bias, residual);
  for (const FusedPathUse& use : fused_path_uses()) {
    if (use.path == "residual_epilogue") {
      EXPECT_EQ(use.fell_back, 0) << use.why_not;
    }
  }
  (run.y.to(torch::kFloat32) * torch::randn({3, 37, 80}, cuda)).sum().backward();
  run.dx = x.grad();
  run.dweight = weight.grad();
  run.dbias = with_bias ? bias.grad() : torch::Tensor();
  run.dresidual = residual.grad();
  return run;
}

// The residual added in the product's C gives the product-then-add's values (rounded once instead of twice),
// and backward is the same: the same gradients bit for bit.
TEST(GpuResidualEpilogue, TheSumInTheProductIsTheProductThenTheAdd) {
  for (const bool with_bias : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "bias " << with_bias);
    const PlusRun fused = run_linear_plus(true, with_bias);
    const PlusRun apart = run_linear_plus(false, with_bias);
    EXPECT_LT(relative_l2_error(fused.y, apart.y.to(torch::kFloat64)), 4e-3);
    EXPECT_GT(fused.y.sub(apart.y).abs().max().item<float>(), 0.0f) << "the one-product path ran: it rounds once";
    EXPECT_TRUE(fused.dx.equal(apart.dx));
    EXPECT_TRUE(fused.dweight.equal(apart.dweight));
    EXPECT_TRUE(fused.dresidual.equal(apart.dresidual));
    if (with_bias) {
      EXPECT_TRUE(fused.dbias.equal(apart.dbias));
    }
  }
}

struct RecomputeSwitch {
  RecomputeSwitch(RecomputedActivation f, bool on) : f(f), was(activation_recompute_enabled(f)) {
    set_activation_recompute(f, on);
  }
  ~RecomputeSwitch() { set_activation_recompute(f, was); }
  RecomputedActivation f;
  bool was;
};

struct RecomputeRun {
  torch::Tensor y, da, db, dweight, dbias;
  int64_t kept_bytes = 0;  // memory alive between forward and backward beyond the inputs
};

RecomputeRun run_recomputed(RecomputedActivation f, bool recompute) {
  const RecomputeSwitch sw(f, recompute);
  torch::manual_seed(3);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const bool two = f == RecomputedActivation::concat_gelu_tanh;
  const int64_t width = f == RecomputedActivation::geglu ? 512 : 256;           // f's input width
  const int64_t in = f == RecomputedActivation::geglu ? 256 : two ? 64 + 256 : 256;  // the Linear's
  auto weight = (torch::randn({48, in}, cuda.dtype(torch::kFloat32)) * 0.05).to(torch::kBFloat16).requires_grad_(true);
  auto bias = (torch::randn({48}, cuda.dtype(torch::kFloat32)) * 0.05).to(torch::kBFloat16).requires_grad_(true);
  weight.mutable_grad() = torch::zeros({48, in}, cuda.dtype(torch::kFloat32));
  bias.mutable_grad() = torch::zeros({48}, cuda.dtype(torch::kFloat32));
  // b: a strided slice of a projection, as HY-Motion's MLP half is.
  const auto proj = torch::randn({4, 300, 64 + width}, cuda);
  auto a = (two ? proj.narrow(-1, 0, 64).contiguous() : torch::randn({4, 300, width}, cuda)).requires_grad_(true);
  auto b_leaf = proj.detach().requires_grad_(two);
  const auto b = two ? b_leaf.narrow(-1, 64, width) : torch::Tensor();
  const auto r = torch::randn({4, 300, 48}, cuda);
  c10::cuda::CUDACachingAllocator::emptyCache();
  torch::cuda::synchronize();
  const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
  RecomputeRun run;
  run.y = recompute ? linear_of_recomputed(f, a, b, weight, bias) : linear(apply_activation(f, a, b), weight, bias);
  EXPECT_EQ(uses_recomputed_linear(f, a, weight, bias), recompute);
  torch::cuda::synchronize();
  run.kept_bytes = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current - before -
                   static_cast<int64_t>(run.y.nbytes());
  (run.y.to(torch::kFloat32) * r).sum().backward();
  run.da = a.grad();
  if (two) run.db = b_leaf.grad();
  run.dweight = weight.grad().clone();
  run.dbias = bias.grad().clone();
  return run;
}

TEST(GpuRecomputedLinear, SameValuesAndInputGradientsLessKept) {
  // The process's first products allocate cuBLAS's workspaces, which would count as kept memory: one run first.
  (void)run_recomputed(RecomputedActivation::gelu, true);
  for (const auto f : {RecomputedActivation::gelu, RecomputedActivation::gelu_tanh, RecomputedActivation::silu,
                       RecomputedActivation::geglu, RecomputedActivation::concat_gelu_tanh}) {
    const auto fused = run_recomputed(f, true);
    const auto plain = run_recomputed(f, false);
    const int which = static_cast<int>(f);
    EXPECT_TRUE(torch::equal(fused.y, plain.y)) << which;
    EXPECT_TRUE(torch::equal(fused.da, plain.da)) << which;
    if (plain.db.defined()) {
      EXPECT_TRUE(torch::equal(fused.db, plain.db)) << which;
    }
    // Both accumulate into float32 slots here; the recomputed f is bitwise the kept one.
    EXPECT_TRUE(torch::equal(fused.dweight, plain.dweight)) << which;
    EXPECT_TRUE(torch::equal(fused.dbias, plain.dbias)) << which;
    EXPECT_LT(fused.kept_bytes, plain.kept_bytes) << which << ": f's output is not kept";
  }
}

struct JoinedRun {
  torch::Tensor y, dleft, dright, dweight, dbias;
  int64_t kept_bytes = 0;  // memory alive between forward and backward beyond the inputs
};

// y = linear([left | GELU_tanh(right)], W, b) for HY-Motion's shapes in small: right a strided slice of a
// projection (as the MLP half of an unsplit linear1 is) or its own tensor; .grad slots in float32 or none.
JoinedRun run_joined(bool joined, bool recompute, bool strided_right, bool slots) {
  const RecomputeSwitch sw(RecomputedActivation::concat_gelu_tanh, recompute);
  const ScopedSwitch joined_switch(joined_linear_enabled, set_joined_linear, joined);
  torch::manual_seed(5);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const int64_t left_width = 64, right_width = 256, out = 48;
  auto weight = (torch::randn({out, left_width + right_width}, cuda.dtype(torch::kFloat32)) * 0.05)
                    .to(torch::kBFloat16).requires_grad_(true);
  auto bias = (torch::randn({out}, cuda.dtype(torch::kFloat32)) * 0.05).to(torch::kBFloat16).requires_grad_(true);
  if (slots) {
    weight.mutable_grad() = torch::zeros(weight.sizes(), cuda.dtype(torch::kFloat32));
    bias.mutable_grad() = torch::zeros({out}, cuda.dtype(torch::kFloat32));
  }
  auto left = torch::randn({4, 300, left_width}, cuda).requires_grad_(true);
  auto proj = torch::randn({4, 300, 32 + right_width}, cuda).requires_grad_(true);
  auto own = torch::randn({4, 300, right_width}, cuda).requires_grad_(true);
  const auto right = strided_right ? proj.narrow(-1, 32, right_width) : own;
  const auto r = torch::randn({4, 300, out}, cuda);
  c10::cuda::CUDACachingAllocator::emptyCache();
  torch::cuda::synchronize();
  const int64_t before = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current;
  JoinedRun run;
  run.y = joined_gelu_linear(left, right, weight, bias);
  torch::cuda::synchronize();
  run.kept_bytes = c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current - before -
                   static_cast<int64_t>(run.y.nbytes());
  (run.y.to(torch::kFloat32) * r).sum().backward();
  run.dleft = left.grad();
  run.dright = (strided_right ? proj.grad().narrow(-1, 32, right_width) : own.grad());
  run.dweight = weight.grad().to(torch::kFloat32);
  run.dbias = bias.grad().to(torch::kFloat32);
  return run;
}

TEST(GpuJoinedLinear, ValuesAndGradientsAreThoseOfTheConcatenatedProduct) {
  for (const bool strided : {false, true}) {
    for (const bool slots : {true, false}) {
      const JoinedRun plain = run_joined(false, false, strided, slots);
      for (const bool recompute : {false, true}) {
        const JoinedRun fused = run_joined(true, recompute, strided, slots);
        const std::string at = std::string(strided ? "strided" : "own") + (slots ? ", slots" : ", no slots") +
                               (recompute ? ", recomputed" : ", kept");
        // The two products round their partial sum to bf16 once more than the one product does.
        EXPECT_LT(relative_l2_error(fused.y, plain.y.to(torch::kFloat64)), 8e-3) << at;
        EXPECT_LT(relative_l2_error(fused.dleft, plain.dleft.to(torch::kFloat64)), 8e-3) << at;
        EXPECT_LT(relative_l2_error(fused.dright, plain.dright.to(torch::kFloat64)), 8e-3) << at;
        EXPECT_LT(relative_l2_error(fused.dweight, plain.dweight.to(torch::kFloat64)), 8e-3) << at;
        EXPECT_LT(relative_l2_error(fused.dbias, plain.dbias.to(torch::kFloat64)), 8e-3) << at;
        EXPECT_TRUE(fused.dleft.is_contiguous() && fused.dright.defined()) << at;
      }
    }
  }
  // What stays alive until backward: the activation [4·300, 256] when kept, nothing when recomputed (the
  // plain composition keeps the whole [4·300, 64 + 256] concatenation).
  const int64_t activation_bytes = 4 * 300 * 256 * 2;
  const JoinedRun kept = run_joined(true, false, false, true);
  const JoinedRun recomputed = run_joined(true, true, false, true);
  const JoinedRun plain = run_joined(false, false, false, true);
  EXPECT_GE(kept.kept_bytes - recomputed.kept_bytes, activation_bytes);
  EXPECT_LT(kept.kept_bytes, plain.kept_bytes);
}

// Three units of zest::linear layers with biases (odd widths, so flat buffers pad).
class LinearNet : public UnitModule {
 public:
  LinearNet() {
    torch::manual_seed(5);
    for (int i = 0; i < 3; ++i) {
      const std::string n = std::to_string(i);
      weights.push_back(register_parameter("w" + n, torch::randn({i == 2 ? 7 : 24, i == 0 ? 9 : 24}) * 0.2));
      biases.push_back(register_parameter("b" + n, torch::randn({i == 2 ? 7 : 24}) * 0.1));
    }
  }
  std::vector<UnitDecl> unit_decls() const override { return {{"u0", {"w0", "b0"}}, {"u1", {"w1", "b1"}}, {"u2", {"w2", "b2"}}}; }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = x.to(weights[0].scalar_type());
    for (int i = 0; i < 3; ++i) {
      h = run_unit("u" + std::to_string(i), [&, i](const Tensors& in) {
            auto y = linear(in[0], weights[i], biases[i]);
            return Tensors{i < 2 ? torch::gelu(y) : y};
          }, {h})[0];
    }
    return h;
  }
  std::vector<torch::Tensor> weights, biases;
};

std::map<std::string, torch::Tensor> train_linear_net(int stage, bool fused, CheckpointPolicy recompute,
                                                      Precision reduce_dtype = Precision::fp32) {
  const auto fusion = fusion_switch(fused);
  auto comm = world_communicator();
  auto model = std::make_shared<LinearNet>();
  EngineConfig ec;
  ec.device = DeviceKind::cuda;
  ec.stage = stage;
  ec.precision = Precision::bf16;
  ec.reduce_dtype = reduce_dtype;
  ec.accumulation_steps = 2;
  ec.clip_norm = 1.0;
  ec.bucket_mb = 1e-6;  // a bucket per unit: stage 2–3 transient buffers come and go within backward
  ec.activation_checkpointing = recompute;
  OptimConfig oc;
  oc.lr = 1e-2;
  Engine engine(model, ec, oc, SchedulerConfig{}, comm);
  for (int step = 0; step < 6; ++step) {
    torch::manual_seed(100 + step);
    const auto x = torch::randn({comm->size() * 2 * 6, 5, 9}).narrow(0, comm->rank() * 12, 12).to(engine.device());
    const auto target = torch::randn({comm->size() * 2 * 6, 5, 7}).narrow(0, comm->rank() * 12, 12).to(engine.device());
    for (int m = 0; m < 2; ++m) {
      const auto out = model->forward(x.narrow(0, m * 6, 6)).to(torch::kFloat32);
      engine.backward(torch::mse_loss(out, target.narrow(0, m * 6, 6)));
    }
    engine.step();
  }
  engine.gather_all_params();
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : model->named_parameters()) out[item.key()] = item.value().detach().to(torch::kCPU, torch::kFloat32);
  return out;
}

// One unit: an MLP whose GELU goes through linear_of_recomputed. Records, at every forward of the unit,
// whether it was a checkpointed unit's recompute and whether the GELU would be recomputed there.
class RecordingMlp : public UnitModule {
 public:
  RecordingMlp() {
    torch::manual_seed(9);
    w1 = register_parameter("w1", torch::randn({32, 16}) * 0.2);
    b1 = register_parameter("b1", torch::randn({32}) * 0.1);
    w2 = register_parameter("w2", torch::randn({16, 32}) * 0.2);
    b2 = register_parameter("b2", torch::randn({16}) * 0.1);
  }
  std::vector<UnitDecl> unit_decls() const override { return {{"mlp", {"w1", "b1", "w2", "b2"}}}; }
  torch::Tensor forward(const torch::Tensor& x) {
    return run_unit("mlp", [&](const Tensors& in) {
             const auto hidden = linear(in[0], w1, b1);
             seen.push_back({is_recomputing(), uses_recomputed_linear(RecomputedActivation::gelu, hidden, w2, b2)});
             return Tensors{linear_of_recomputed(RecomputedActivation::gelu, hidden, {}, w2, b2)};
           }, {x.to(w1.scalar_type())})[0];
  }
  torch::Tensor w1, b1, w2, b2;
  std::vector<std::pair<bool, bool>> seen;  // (inside a unit's recompute, GELU recomputed)
};

std::vector<std::pair<bool, bool>> one_step_seen(CheckpointPolicy policy) {
  const RecomputeSwitch sw(RecomputedActivation::gelu, true);
  auto model = std::make_shared<RecordingMlp>();
  EngineConfig ec;
  ec.device = DeviceKind::cuda;
  ec.precision = Precision::bf16;
  ec.activation_checkpointing = policy;
  Engine engine(model, ec, OptimConfig{}, SchedulerConfig{}, world_communicator());
  torch::manual_seed(1);
  const auto x = torch::randn({4, 10, 16}).to(engine.device());
  engine.backward(model->forward(x).to(torch::kFloat32).square().mean());
  engine.step();
  return model->seen;
}

TEST(GpuRecomputedLinear, KeptInsideACheckpointedUnitsRecompute) {
  // Not checkpointed: the unit's one forward records autograd's graph and recomputes the GELU in backward.
  const auto plain = one_step_seen(CheckpointPolicy::none);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0], std::make_pair(false, true));
  // Checkpointed: the forward under no-grad records nothing; its recompute in backward keeps the GELU, whose
  // output lives only until the unit's backward that follows.
  const auto checkpointed = one_step_seen(CheckpointPolicy::all);
  ASSERT_EQ(checkpointed.size(), 2u);
  EXPECT_EQ(checkpointed[0], std::make_pair(false, false));
  EXPECT_EQ(checkpointed[1], std::make_pair(true, false));
}

TEST(DistGpuLinearFusion, TrainsLikeTheUnfusedPathAtEveryStage) {
  for (const auto reduce_dtype : {Precision::fp32, Precision::bf16}) {
    for (int stage : {0, 1, 2, 3}) {
      for (const auto recompute : {CheckpointPolicy::none, CheckpointPolicy::all}) {
        const std::string what = std::string("stage ") + std::to_string(stage) + ", reduce_dtype " +
                                 to_string(reduce_dtype) + (recompute == CheckpointPolicy::all ? ", recomputed" : "");
        const auto before = linear_grad_fusion_counts();
        const auto fused = train_linear_net(stage, true, recompute, reduce_dtype);
        const auto after = linear_grad_fusion_counts();
        EXPECT_GT(after.fused - before.fused, 0) << what;
        EXPECT_EQ(after.unfused - before.unfused, 0) << what << ": every backward found its slots";
        const auto plain = train_linear_net(stage, false, recompute, reduce_dtype);
        for (const auto& [name, want] : plain) {
          const double scale = std::max(want.abs().max().item<double>(), 1e-3);
          EXPECT_LT((fused.at(name) - want).abs().max().item<double>() / scale, 2e-2) << what << " " << name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace zest::testing
