// HY-Motion on CUDA (ctest label `gpu`): with zest's kernels in its blocks (modulated layer norm, gated
// residual, the attention output beside the activated MLP half) the tiny golden model gives the
// reference's output and gradients in float32, and tracks them in bf16 as the CPU path does
// (tests/hymotion/test_hymotion_precision.cpp).
#include "common/scoped_switch.h"
#include "common/tensor_close.h"
#include "hymotion/hymotion_test_util.h"
#include "kernels/block_sparse_attention_op.h"
#include "kernels/concat_gelu_op.h"
#include "kernels/fused_paths.h"
#include "kernels/gated_residual_op.h"
#include "models/hymotion/packed_tokens.h"

#include <gtest/gtest.h>

namespace zest::hymotion::test {
namespace {

using ::zest::testing::closeness;
using ::zest::testing::kGradParity;

HyMotionInputs on_gpu(HyMotionInputs in) {
  for (torch::Tensor* t : {&in.x, &in.ctxt_input, &in.vtxt_input, &in.timesteps, &in.x_mask_temporal,
                           &in.ctxt_mask_temporal}) {
    if (t->defined()) *t = t->to(torch::kCUDA);
  }
  return in;
}

// The tiny model's shapes take the kernels (else these tests would check ATen's ops again).
TEST(GpuHyMotion, TheTinyShapesTakeTheKernels) {
  const auto opts = torch::TensorOptions().device(torch::kCUDA);
  const auto h = torch::randn({2, 7, 3 * 32 + 128}, opts);
  EXPECT_TRUE(uses_concat_gelu_kernels(torch::randn({2, 7, 32}, opts), h.narrow(-1, 96, 128)));
  const auto mod = torch::randn({2, 1, 6 * 32}, opts).chunk(6, -1);
  EXPECT_TRUE(uses_gated_residual_kernels(torch::randn({2, 7, 32}, opts), torch::randn({2, 7, 32}, opts), mod[2]));
}

TEST(GpuHyMotion, Float32MatchesTheReference) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);
  model->to(torch::kCUDA);
  const auto out = model->forward(on_gpu(golden.inputs()));
  EXPECT_LE(max_abs_diff(out.cpu(), golden.output("sample")), 1e-4);
  out.pow(2).mean().backward();
  for (const auto& item : model->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    const auto c = closeness(item.value().grad().cpu(), golden.grads().at(item.key()), kGradParity);
    EXPECT_TRUE(c.ok) << item.key() << ": " << c.describe();
  }
}

// The CPU test's bounds (bf16 rounding; a zeroed gradient or a float32 part computed in bf16 is O(1)).
TEST(GpuHyMotion, Bf16TracksTheFloat32Reference) {
  const Golden golden = Golden::load();
  auto model = golden_model(golden);
  model->to(torch::kCUDA, torch::kBFloat16);
  const auto out = model->forward(on_gpu(golden.inputs()));
  EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
  EXPECT_LE(testing::relative_l2_error(out.cpu(), golden.output("sample")), 2e-2);
  out.to(torch::kFloat32).pow(2).mean().backward();
  for (const auto& item : model->named_parameters()) {
    const auto& grad = item.value().grad();
    ASSERT_TRUE(grad.defined()) << item.key();
    const auto& expected = golden.grads().at(item.key());
    if (expected.abs().max().item<double>() < 1e-9) continue;  // the refiner's k-norm bias: mathematically 0
    EXPECT_LE(testing::relative_l2_error(grad.cpu(), expected), 1e-1) << item.key();
  }
}

// HY-Motion at configs that are not the release: head dims of 96 and 40 (rows of 12 and 5 lanes, padded
// to 16 and 8) and widths of 288 and 200 that no whole number of warps splits evenly. On the GPU every
// fused path is taken, none falls back, and float32 there equals the CPU's op-by-op form (output and
// every gradient); bf16 takes the same paths, and the block-sparse attention, and tracks it.
HyMotionConfig shape_variant(int64_t feat_dim, int64_t heads) {
  HyMotionConfig c = load_config("hymotion_tiny");
  c.feat_dim = feat_dim;
  c.num_heads = heads;
  c.num_layers = 3;  // one double block, two single blocks
  c.validate();
  return c;
}

// Every parameter drawn at random (the release zero-initialises the gates, which would leave the blocks
// out of the output), the same on every call.
std::shared_ptr<HyMotionModel> random_model(const HyMotionConfig& c) {
  torch::manual_seed(5);
  auto model = std::make_shared<HyMotionModel>(c);
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.1);
  return model;
}

HyMotionInputs random_inputs(const HyMotionConfig& c) {
  torch::manual_seed(6);
  const int64_t batch = 2, frames = 24, tokens = 6;
  auto lengths_mask = [](int64_t width, std::vector<int64_t> lengths) {
    auto mask = torch::zeros({static_cast<int64_t>(lengths.size()), width}, torch::kBool);
    for (size_t b = 0; b < lengths.size(); ++b) mask[static_cast<int64_t>(b)].narrow(0, 0, lengths[b]).fill_(true);
    return mask;
  };
  return {torch::randn({batch, frames, c.input_dim}), torch::randn({batch, tokens, c.ctxt_input_dim}),
          torch::randn({batch, 1, c.vtxt_input_dim}), torch::rand({batch}),
          lengths_mask(frames, {24, 17}), lengths_mask(tokens, {6, 4})};
}

// `sixteen_bit`: the block-sparse attention is taken too (float32 runs LibTorch's attention by design, unrecorded).
void expect_no_fallback(bool sixteen_bit) {
  const auto uses = fused_path_uses();
  bool qk_norm_rope = false, layer_norm_modulate = false, block_sparse_attention = false;
  for (const auto& use : uses) {
    EXPECT_EQ(use.fell_back, 0) << use.path << ": " << use.why_not;
    qk_norm_rope = qk_norm_rope || (use.path == "qk_norm_rope" && use.taken > 0);
    layer_norm_modulate = layer_norm_modulate || (use.path == "layer_norm_modulate" && use.taken > 0);
    block_sparse_attention = block_sparse_attention || (use.path == "block_sparse_attention" && use.taken > 0);
  }
  EXPECT_TRUE(qk_norm_rope);
  EXPECT_TRUE(layer_norm_modulate);
  EXPECT_EQ(block_sparse_attention, sixteen_bit);
}

TEST(GpuHyMotion, ConfigsOtherThanTheReleaseTakeEveryFusedPath) {
  for (const auto& [feat_dim, heads] : std::vector<std::pair<int64_t, int64_t>>{{288, 3}, {200, 5}}) {
    SCOPED_TRACE(::testing::Message() << "feat_dim " << feat_dim << ", " << heads << " heads");
    const HyMotionConfig c = shape_variant(feat_dim, heads);
    const HyMotionInputs inputs = random_inputs(c);
    auto cpu = random_model(c);
    const auto want = cpu->forward(inputs);
    want.pow(2).mean().backward();

    auto gpu = random_model(c);
    gpu->to(torch::kCUDA);
    reset_fused_path_uses();
    const auto got = gpu->forward(on_gpu(inputs));
    got.pow(2).mean().backward();
    expect_no_fallback(/*sixteen_bit=*/false);
    EXPECT_LE(testing::relative_l2_error(got.cpu(), want), 1e-5);
    const auto cpu_params = cpu->named_parameters();
    for (const auto& item : gpu->named_parameters()) {
      ASSERT_TRUE(item.value().grad().defined()) << item.key();
      if (item.key().find("self_attn_k_norm.bias") != std::string::npos) {
        // Zero in exact arithmetic (a per-head shift of every key adds one logit to a whole softmax row):
        // both sides hold rounding noise of ~1e-9, which no relative bound compares.
        EXPECT_LE(item.value().grad().abs().max().item<double>(), 1e-7) << item.key();
        continue;
      }
      const auto c_grad = closeness(item.value().grad().cpu(), cpu_params[item.key()].grad(), kGradParity);
      EXPECT_TRUE(c_grad.ok) << item.key() << ": " << c_grad.describe();
    }

    auto half = random_model(c);
    half->to(torch::kCUDA, torch::kBFloat16);
    // The block-sparse attention is off by default (kernels/block_sparse_attention_op.h); on here, so that
    // these shapes run it inside the model.
    const testing::ScopedSwitch attention_on(block_sparse_attention_enabled, set_block_sparse_attention, true);
    reset_fused_path_uses();
    const auto got16 = half->forward(on_gpu(inputs));
    got16.to(torch::kFloat32).pow(2).mean().backward();
    expect_no_fallback(/*sixteen_bit=*/true);
    EXPECT_LE(testing::relative_l2_error(got16.cpu(), want), 2e-2);
    reset_fused_path_uses();
  }
}

// The training loss over packed valid tokens on the GPU (the kernels reading packed rows, the attention's
// inputs scattered to the padded layout) against the padded loss on the CPU: the same loss and gradients in
// float32, at a width and head count other than the release's, with every fused path taken.
TEST(GpuHyMotion, PackedTokensGiveThePaddedLossAndGradients) {
  const HyMotionConfig c = shape_variant(288, 3);
  HyMotionInputs in = random_inputs(c);
  in.ctxt_mask_temporal[0][1] = false;  // a hole in sample 0's text
  const auto t = torch::tensor({0.3f, 0.8f});
  torch::manual_seed(9);
  const auto noise = torch::randn(in.x.sizes());
  auto loss_of = [&](HyMotionModel& model, const HyMotionInputs& x) {
    return flow_matching_loss_at(model, x.x, x.ctxt_input, x.vtxt_input, x.x_mask_temporal, x.ctxt_mask_temporal,
                                 t.to(x.x.device()), noise.to(x.x.device()));
  };
  auto cpu = random_model(c);
  torch::Tensor want;
  {
    const testing::ScopedSwitch padded(packed_tokens_enabled, set_packed_tokens, false);
    want = loss_of(*cpu, in);
    want.backward();
  }
  auto gpu = random_model(c);
  gpu->to(torch::kCUDA);
  const testing::ScopedSwitch packed(packed_tokens_enabled, set_packed_tokens, true);
  reset_fused_path_uses();
  const auto got = loss_of(*gpu, on_gpu(in));
  got.backward();
  expect_no_fallback(/*sixteen_bit=*/false);
  bool gated_residual_taken = false;
  for (const auto& use : fused_path_uses()) gated_residual_taken |= use.path == "gated_residual" && use.taken > 0;
  EXPECT_TRUE(gated_residual_taken);
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-5 * std::abs(want.item<double>()));
  const auto cpu_params = cpu->named_parameters();
  for (const auto& item : gpu->named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    if (item.key().find("self_attn_k_norm.bias") != std::string::npos) {  // zero but for rounding, as above
      EXPECT_LE(item.value().grad().abs().max().item<double>(), 1e-7) << item.key();
      continue;
    }
    const auto close = closeness(item.value().grad().cpu(), cpu_params[item.key()].grad(), kGradParity);
    EXPECT_TRUE(close.ok) << item.key() << ": " << close.describe();
  }
  reset_fused_path_uses();
}

}  // namespace
}  // namespace zest::hymotion::test
