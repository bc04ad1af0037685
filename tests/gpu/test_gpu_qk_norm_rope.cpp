// The q/k RMSNorm + RoPE kernels (kernels/qk_norm_rope.h) against the op chain they replace, in
// float64 on the same inputs: one stream and two (the double block's motion and text joined), a
// projection that is a slice of a wider one (the single block's linear1), RoPE on part of the joint
// sequence, float32 and bf16; forward values, the projections' and the norm weights' gradients, and a
// bitwise repeat.
#include "common/scoped_switch.h"
#include "common/tensor_close.h"
#include "kernels/block_sparse_attention_op.h"
#include "kernels/qk_norm_rope_op.h"
#include "models/hymotion/attention_mask.h"
#include "models/hymotion/layers.h"

#include <ATen/Context.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <functional>

namespace zest::testing {
namespace {

constexpr int64_t kHeads = 3;
constexpr double kEps = 1e-6;

struct Case {
  torch::ScalarType dtype;
  int64_t head_dim;
  std::vector<int64_t> seqs;  // one or two streams
  int64_t extra_columns;      // > 0: each projection is the first 3·H·d columns of a wider tensor
  int64_t rotated;
};

// The op chain in float64: split, RMSNorm per head with the weight, join, RoPE on [0, rotated).
std::vector<torch::Tensor> reference(const std::vector<torch::Tensor>& projections,
                                     const std::vector<torch::Tensor>& weights, const torch::Tensor& cos,
                                     const torch::Tensor& sin, int64_t d) {
  std::vector<torch::Tensor> qs, ks, vs;
  for (size_t i = 0; i < projections.size(); ++i) {
    const auto& p = projections[i];
    const auto parts = p.view({p.size(0), p.size(1), 3, kHeads, d}).unbind(2);
    auto norm = [&](const torch::Tensor& x, const torch::Tensor& w) {
      return x * torch::rsqrt(x.pow(2).mean(-1, true) + kEps) * w;
    };
    qs.push_back(norm(parts[0], weights[2 * i]));
    ks.push_back(norm(parts[1], weights[2 * i + 1]));
    vs.push_back(parts[2]);
  }
  auto q = torch::cat(qs, 1), k = torch::cat(ks, 1), v = torch::cat(vs, 1);
  auto rope = [&](const torch::Tensor& x) {
    const int64_t r = cos.size(0);
    const auto head = x.narrow(1, 0, r);
    auto pairs = head.reshape({head.size(0), r, kHeads, d / 2, 2}).unbind(-1);
    const auto rotated = torch::stack({-pairs[1], pairs[0]}, -1).flatten(-2);
    const auto c = cos.unsqueeze(1), s = sin.unsqueeze(1);
    return torch::cat({head * c + rotated * s, x.narrow(1, r, x.size(1) - r)}, 1);
  };
  return {rope(q), rope(k), v};
}

struct KernelsOn {
  KernelsOn() : was(qk_norm_rope_enabled()) { set_qk_norm_rope(true); }
  ~KernelsOn() { set_qk_norm_rope(was); }
  bool was;
};

// hymotion::attention on LibTorch's attention (cuDNN's, whose graph cache these tests are about), not on zest's
// block-sparse kernels (tests/gpu/test_gpu_block_sparse_attention.cpp).
ScopedSwitch libtorch_attention() { return {block_sparse_attention_enabled, set_block_sparse_attention, false}; }

void check_case(const Case& c) {
  const KernelsOn on;
  torch::manual_seed(7);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const int64_t d = c.head_dim, width = 3 * kHeads * d, batch = 2;
  int64_t total = 0;
  std::vector<torch::Tensor> leaves, projections, weights;
  std::vector<QkvProjection> streams;
  for (const int64_t seq : c.seqs) {
    total += seq;
    auto wide = torch::randn({batch, seq, width + c.extra_columns}, cuda).to(c.dtype).requires_grad_(true);
    leaves.push_back(wide);
    projections.push_back(wide.narrow(-1, 0, width));
    for (int part = 0; part < 2; ++part) {
      weights.push_back((1.0 + 0.3 * torch::randn({d}, cuda)).to(c.dtype).requires_grad_(true));
    }
    streams.push_back({projections.back(), weights[weights.size() - 2], weights.back()});
  }
  const auto angles = torch::rand({c.rotated, d}, cuda) * 6.0;
  const auto cos = angles.cos(), sin = angles.sin();
  ASSERT_TRUE(uses_qk_norm_rope_kernels(streams, kHeads, cos, sin));
  const auto got = qk_norm_rope(streams, kHeads, cos, sin, kEps);
  ASSERT_EQ(got.q.sizes(), (std::vector<int64_t>{batch, total, kHeads, d}));

  // Reference on float64 copies of the same values.
  std::vector<torch::Tensor> ref_leaves, ref_projections, ref_weights;
  for (const auto& leaf : leaves) {
    ref_leaves.push_back(leaf.detach().to(torch::kFloat64).requires_grad_(true));
    ref_projections.push_back(ref_leaves.back().narrow(-1, 0, width));
  }
  for (const auto& w : weights) ref_weights.push_back(w.detach().to(torch::kFloat64).requires_grad_(true));
  const auto want = reference(ref_projections, ref_weights, cos.to(torch::kFloat64), sin.to(torch::kFloat64), d);

  const bool bf16 = c.dtype == torch::kBFloat16;
  const double value_tol = bf16 ? 1e-2 : 1e-5, grad_tol = bf16 ? 3e-2 : 1e-4;
  EXPECT_LT(relative_l2_error(got.q, want[0]), value_tol);
  EXPECT_LT(relative_l2_error(got.k, want[1]), value_tol);
  EXPECT_TRUE(torch::equal(got.v.to(torch::kCPU, torch::kFloat64), want[2].detach().cpu()));

  const auto gq = torch::randn_like(got.q), gk = torch::randn_like(got.k), gv = torch::randn_like(got.v);
  torch::autograd::backward({got.q, got.k, got.v}, {gq, gk, gv});
  torch::autograd::backward({want[0], want[1], want[2]},
                            {gq.to(torch::kFloat64), gk.to(torch::kFloat64), gv.to(torch::kFloat64)});
  for (size_t i = 0; i < leaves.size(); ++i) {
    const auto g = leaves[i].grad(), w = ref_leaves[i].grad();
    EXPECT_LT(relative_l2_error(g.narrow(-1, 0, width), w.narrow(-1, 0, width)), grad_tol) << "stream " << i;
    if (c.extra_columns > 0) {
      EXPECT_EQ(g.narrow(-1, width, c.extra_columns).abs().max().item<double>(), 0.0) << "columns beyond qkv";
    }
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_LT(relative_l2_error(weights[i].grad(), ref_weights[i].grad()), grad_tol) << "weight " << i;
  }

  // The same inputs again: bitwise the same values and gradients (fixed-order sums).
  const auto first_dproj = leaves[0].grad().clone(), first_dw = weights[0].grad().clone();
  for (auto& l : leaves) l.mutable_grad() = torch::Tensor();
  for (auto& w : weights) w.mutable_grad() = torch::Tensor();
  const auto again = qk_norm_rope(streams, kHeads, cos, sin, kEps);
  EXPECT_TRUE(torch::equal(again.q, got.q));
  torch::autograd::backward({again.q, again.k, again.v}, {gq, gk, gv});
  EXPECT_TRUE(torch::equal(leaves[0].grad(), first_dproj));
  EXPECT_TRUE(torch::equal(weights[0].grad(), first_dw));
}

// The released head dims (64, 128) and others: rows of a power-of-two lane count (32, 256), padded lane
// groups (40, 96, 152 and 200 in bf16: 5, 12, 19, 25 lanes), float32's two accesses a lane past 128 (200,
// 256), float32's four-element lanes (36: 9 lanes of 16) and one-lane rows (8 in bf16).
TEST(GpuQkNormRope, MatchesTheOpChain) {
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const std::vector<int64_t> dims = dtype == torch::kFloat32 ? std::vector<int64_t>{64, 128, 36, 96, 200, 256}
                                                               : std::vector<int64_t>{64, 128, 8, 32, 40, 96, 152, 200, 256};
    for (const int64_t d : dims) {
      SCOPED_TRACE(std::string(dtype == torch::kFloat32 ? "fp32" : "bf16") + " d=" + std::to_string(d));
      check_case({dtype, d, {37}, 0, 37});           // one stream, all rotated
      check_case({dtype, d, {29}, 5 * d, 11});        // a slice of a wider projection, part rotated
      check_case({dtype, d, {23, 9}, 0, 23});         // motion and text joined, motion rotated
      check_case({dtype, d, {23, 9}, 0, 27});         // RoPE reaching into the second stream
      check_case({dtype, d, {4000, 2500}, 0, 4000});  // rows enough for several passes of each backward block
    }
  }
}

TEST(GpuQkNormRope, OtherShapesTakeTheOpChain) {
  const KernelsOn on;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  for (const int64_t d : {34, 264, 6}) {  // not whole 16-byte accesses; past 256; under 8
    const auto w = torch::ones({d}, cuda);
    const auto p = torch::randn({2, 5, 3 * kHeads * d}, cuda);
    const auto cos = torch::ones({5, d}, cuda);
    EXPECT_FALSE(uses_qk_norm_rope_kernels({{p, w, w}}, kHeads, cos, cos)) << "head dim " << d;
  }
  const auto w64 = torch::ones({64}, cuda);
  const auto p64 = torch::randn({2, 5, 3 * kHeads * 64}, cuda);
  EXPECT_FALSE(uses_qk_norm_rope_kernels({{p64, w64, w64}}, kHeads, torch::ones({6, 64}, cuda),
                                         torch::ones({6, 64}, cuda)))
      << "more table rows than positions";
  EXPECT_FALSE(uses_qk_norm_rope_kernels({{p64.cpu(), w64.cpu(), w64.cpu()}}, kHeads, torch::ones({5, 64}),
                                         torch::ones({5, 64})))
      << "CPU";
}

// HY-Motion 1B's double block (20 heads of 64, 360 motion frames + 128 text tokens, bf16, the narrow-band
// bias) through the kernels into cuDNN's attention and back, against the op chain: at these shapes a
// whole-model run once failed in cuDNN's attention backward with the kernels on. The variants say which
// inputs the attention accepts.
TEST(GpuQkNormRope, FeedsAttentionAtTheReleasedShapes) {
  const KernelsOn on;
  const auto libtorch = libtorch_attention();
  torch::manual_seed(11);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const int64_t batch = 2, heads = 20, d = 64, motion = 360, text = 128, width = 3 * heads * d;
  const auto p0 = torch::randn({batch, motion, width}, cuda).to(torch::kBFloat16).requires_grad_(true);
  const auto p1 = torch::randn({batch, text, width}, cuda).to(torch::kBFloat16).requires_grad_(true);
  std::vector<torch::Tensor> w;
  for (int i = 0; i < 4; ++i) w.push_back((1.0 + 0.3 * torch::randn({d}, cuda)).to(torch::kBFloat16));
  const auto rope = hymotion::Rope::make(motion + text, d);
  const auto cos = rope.cos.to(torch::kCUDA), sin = rope.sin.to(torch::kCUDA);
  const auto x_valid = torch::arange(motion, cuda.dtype(torch::kLong)).unsqueeze(0) <
                       torch::tensor({300, 360}, cuda.dtype(torch::kLong)).unsqueeze(1);
  const auto c_valid = torch::arange(text, cuda.dtype(torch::kLong)).unsqueeze(0) <
                       torch::tensor({40, 128}, cuda.dtype(torch::kLong)).unsqueeze(1);
  const auto bias = hymotion::mmdit_attention_bias(x_valid, c_valid, hymotion::MaskMode::narrowband, 60);
  const auto g = torch::randn({batch, motion + text, heads * d}, cuda);
  const std::vector<QkvProjection> streams{{p0, w[0], w[1]}, {p1, w[2], w[3]}};
  ASSERT_TRUE(uses_qk_norm_rope_kernels(streams, heads, cos, sin));

  // Gradients of p0, p1 through one way of making the attention's inputs, or the error it raised.
  auto run = [&](const std::function<std::vector<torch::Tensor>()>& inputs) -> std::pair<std::string, torch::Tensor> {
    p0.mutable_grad() = torch::Tensor();
    p1.mutable_grad() = torch::Tensor();
    try {
      const auto qkv = inputs();
      const auto o = hymotion::attention(qkv[0], qkv[1], qkv[2], bias);
      (o.to(torch::kFloat32) * g).sum().backward();
      torch::cuda::synchronize();
      return {"", torch::cat({p0.grad().flatten(), p1.grad().flatten()}).to(torch::kFloat32)};
    } catch (const std::exception& e) {
      const std::string what = e.what();
      return {what.substr(0, what.find('\n')), {}};
    }
  };
  const auto kernels = [&] {
    const auto in = qk_norm_rope(streams, heads, cos, sin, 1e-6);
    return std::vector<torch::Tensor>{in.q, in.k, in.v};
  };
  const auto kernels_cloned = [&] {
    const auto in = qk_norm_rope(streams, heads, cos, sin, 1e-6);
    return std::vector<torch::Tensor>{in.q.clone(), in.k.clone(), in.v.clone()};
  };
  const auto op_chain = [&] {
    std::vector<torch::Tensor> q, k, v;
    for (size_t i = 0; i < 2; ++i) {
      const auto& p = i == 0 ? p0 : p1;
      const auto parts = p.view({batch, p.size(1), 3, heads, d}).unbind(2);
      auto norm = [&](const torch::Tensor& x, const torch::Tensor& weight) {
        const auto xf = x.to(torch::kFloat32);
        return ((xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6)).to(torch::kBFloat16) * weight);
      };
      q.push_back(norm(parts[0], w[2 * i]));
      k.push_back(norm(parts[1], w[2 * i + 1]));
      v.push_back(parts[2]);
    }
    return std::vector<torch::Tensor>{hymotion::apply_rope(torch::cat(q, 1), cos, sin),
                                      hymotion::apply_rope(torch::cat(k, 1), cos, sin), torch::cat(v, 1)};
  };
  const auto want = run(op_chain);
  ASSERT_EQ(want.first, "") << "the op chain";
  const auto cloned = run(kernels_cloned);
  const auto got = run(kernels);
  std::cout << "attention on the kernels' outputs: " << (got.first.empty() ? "ok" : got.first)
            << "; on copies of them: " << (cloned.first.empty() ? "ok" : cloned.first) << "\n";
  ASSERT_EQ(got.first, "") << "the kernels' outputs";
  EXPECT_LT(relative_l2_error(got.second, want.second), 3e-2);
}

// Only cuDNN's fused attention may run while one lives (the others off), as LibTorch picks it for
// HY-Motion on an H200.
struct OnlyCudnnAttention {
  OnlyCudnnAttention() {
    auto& c = at::globalContext();
    was = {c.userEnabledCuDNNSDP(), c.userEnabledFlashSDP(), c.userEnabledMemEfficientSDP(), c.userEnabledMathSDP()};
    c.setSDPUseCuDNN(true), c.setSDPUseFlash(false), c.setSDPUseMemEfficient(false), c.setSDPUseMath(false);
  }
  ~OnlyCudnnAttention() {
    auto& c = at::globalContext();
    c.setSDPUseCuDNN(was[0]), c.setSDPUseFlash(was[1]), c.setSDPUseMemEfficient(was[2]), c.setSDPUseMath(was[3]);
  }
  std::array<bool, 4> was{};
};

// Two attentions whose q, k, v and bias are laid out alike (as the q/k kernels lay out every block's)
// but whose output gradients are not: the single block's arrives as a slice of the wider gradient of
// [attention | MLP half], the double block's whole. cuDNN caches its backward graph by q, k, v and the
// bias only; before hymotion::attention handed on one gradient layout, the second call ran the first
// call's graph on the other layout (wrong gradients, or the whole-model failures of 2026-12-01). Both
// orders, each against float32 attention on the same values.
TEST(GpuQkNormRope, AttentionGradientsDoNotDependOnTheGradientsLayout) {
  const OnlyCudnnAttention cudnn;
  const auto libtorch = libtorch_attention();
  torch::manual_seed(23);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const int64_t batch = 2, heads = 6, d = 64, motion = 88, text = 40, seq = motion + text, extra = 96;
  const auto x_valid = torch::arange(motion, cuda.dtype(torch::kLong)).unsqueeze(0) <
                       torch::tensor({70, 88}, cuda.dtype(torch::kLong)).unsqueeze(1);
  const auto c_valid = torch::arange(text, cuda.dtype(torch::kLong)).unsqueeze(0) <
                       torch::tensor({17, 40}, cuda.dtype(torch::kLong)).unsqueeze(1);
  const auto bias = hymotion::mmdit_attention_bias(x_valid, c_valid, hymotion::MaskMode::narrowband, 20);
  std::vector<torch::Tensor> qkv;
  for (int i = 0; i < 3; ++i) {
    qkv.push_back(torch::randn({batch, seq, heads, d}, cuda).to(torch::kBFloat16).requires_grad_(true));
  }
  const auto g = torch::randn({batch, seq, heads * d + extra}, cuda);

  // dq, dk, dv of sum(o · g[..., :H·d]), the output's gradient whole or a slice of a wider one.
  auto gradients = [&](bool sliced, bool reference) {
    std::vector<torch::Tensor> leaves;
    for (const auto& t : qkv) leaves.push_back(reference ? t.detach().to(torch::kFloat32).requires_grad_(true) : t);
    for (const auto& t : leaves) t.mutable_grad() = torch::Tensor();
    torch::Tensor o;
    if (reference) {  // float32 attention by its formula
      const auto q = leaves[0].transpose(1, 2), k = leaves[1].transpose(1, 2), v = leaves[2].transpose(1, 2);
      const auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(d)) +
                          bias.to(torch::kFloat32);
      o = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({batch, seq, heads * d});
    } else {
      o = hymotion::attention(leaves[0], leaves[1], leaves[2], bias);
    }
    // The cast comes after the cat, so the output's gradient stays a slice (as in the single block).
    const auto loss = sliced ? (torch::cat({o, torch::zeros({batch, seq, extra}, o.options())}, -1).to(torch::kFloat32) * g).sum()
                             : (o.to(torch::kFloat32) * g.narrow(-1, 0, heads * d)).sum();
    loss.backward();
    return std::vector<torch::Tensor>{leaves[0].grad().clone(), leaves[1].grad().clone(), leaves[2].grad().clone()};
  };
  const auto want = gradients(false, true);
  for (const bool sliced_first : {true, false}) {
    for (const bool sliced : {sliced_first, !sliced_first}) {
      const auto got = gradients(sliced, false);
      for (int i = 0; i < 3; ++i) {
        EXPECT_LT(relative_l2_error(got[static_cast<size_t>(i)], want[static_cast<size_t>(i)]), 3e-2)
            << "gradient " << "qkv"[i] << (sliced ? ", sliced" : ", whole") << " output gradient, "
            << (sliced == sliced_first ? "first" : "second") << " call";
      }
    }
  }
}

}  // namespace
}  // namespace zest::testing
