// The block-sparse attention kernels (kernels/block_sparse_attention.h) against softmax(q·kᵀ/√d + bias)·v in
// float64 on the same 16-bit inputs, output and q/k/v gradients by relative L2 error (LibTorch's own 16-bit
// attention error printed beside them): HY-Motion's mask over strided q/k/v views, random tiled masks at every
// head dim, other lengths, a shared bias, an open one, rows the bias closes whole; and which inputs they refuse.
#include "common/scoped_switch.h"
#include "common/tensor_close.h"
#include "core/compat.h"
#include "kernels/block_sparse_attention_op.h"
#include "kernels/fused_paths.h"
#include "models/hymotion/attention_mask.h"
#include "models/hymotion/layers.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace zest::testing {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int64_t kTile = 64;

torch::TensorOptions on_cuda() { return torch::TensorOptions().device(torch::kCUDA); }

std::string name_of(torch::ScalarType dtype) { return dtype == torch::kBFloat16 ? "bf16" : "fp16"; }

ScopedSwitch kernels_on() { return {block_sparse_attention_enabled, set_block_sparse_attention, true}; }

class GpuBlockSparseAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  }
};

// ---- inputs ----

enum class Layout {
  joint,        // q, k, v unbind(2) views of one [B, S, 3, H, d] tensor (HY-Motion's split_qkv)
  own_q,        // q contiguous, k and v unbind(2) views of one [B, Sk, 2, H, d] tensor
  contiguous,   // three contiguous tensors
};

// q [B, Sq, H, d], k and v [B, Sk, H, d] of N(0, 1) values in dtype, requiring gradients through their leaves.
std::vector<torch::Tensor> make_qkv(Layout layout, int64_t batch, int64_t q_len, int64_t k_len, int64_t heads,
                                    int64_t head_dim, torch::ScalarType dtype) {
  const auto leaf = [&](std::vector<int64_t> sizes) {
    return torch::randn(sizes, on_cuda()).to(dtype).requires_grad_(true);
  };
  if (layout == Layout::joint) {
    EXPECT_EQ(q_len, k_len);
    return leaf({batch, q_len, 3, heads, head_dim}).unbind(2);
  }
  const auto q = leaf({batch, q_len, heads, head_dim});
  if (layout == Layout::own_q) {
    const auto kv = leaf({batch, k_len, 2, heads, head_dim}).unbind(2);
    return {q, kv[0], kv[1]};
  }
  return {q, leaf({batch, k_len, heads, head_dim}), leaf({batch, k_len, heads, head_dim})};
}

// [batch, 1, q_len, k_len] in dtype: values in [-2, 2] with a fraction `holes` of them −inf.
torch::Tensor random_bias(int64_t batch, int64_t q_len, int64_t k_len, double holes, torch::ScalarType dtype) {
  const auto values = torch::rand({batch, 1, q_len, k_len}, on_cuda()) * 4 - 2;
  return values.masked_fill(torch::rand_like(values) < holes, kNegInf).to(dtype);
}

// [batch, 1, n, n] in dtype whose 64 × 64 tiles (the last ones partial) are each closed whole (−inf), all zero,
// or mixed (values in [-2, 2] and −inf). No row is closed whole: a diagonal tile is never closed, and the
// diagonal itself never −inf.
torch::Tensor tiled_bias(int64_t batch, int64_t n, torch::ScalarType dtype) {
  const int64_t tiles = (n + kTile - 1) / kTile;
  auto kind = torch::randint(0, 3, {batch, tiles, tiles}, on_cuda().dtype(torch::kLong));  // 0 closed, 1 zero, 2 mixed
  kind = torch::where(torch::eye(tiles, on_cuda().dtype(torch::kBool)), kind.clamp_min(1), kind);
  for (int64_t k = 0; k < 3; ++k) EXPECT_TRUE((kind == k).any().item<bool>()) << "no tile of kind " << k;
  const auto per_element =
      kind.repeat_interleave(kTile, 1).repeat_interleave(kTile, 2).narrow(1, 0, n).narrow(2, 0, n);  // [B, n, n]
  const auto values = torch::rand({batch, n, n}, on_cuda()) * 4 - 2;
  const auto off_diagonal = torch::eye(n, on_cuda().dtype(torch::kBool)).logical_not();
  const auto mixed = values.masked_fill((torch::rand_like(values) < 0.3).logical_and(off_diagonal), kNegInf);
  const auto bias = torch::where(per_element == 0, torch::full_like(values, kNegInf),
                                 torch::where(per_element == 1, torch::zeros_like(values), mixed));
  return bias.unsqueeze(1).to(dtype);
}

// ---- the kernels, the float64 truth, LibTorch ----

struct Attended {
  torch::Tensor out, dq, dk, dv;  // out [B, Sq, H, d]; the gradients of Σ out · grad_out
};

Attended through_kernels(const std::vector<torch::Tensor>& qkv, const torch::Tensor& bias,
                         const torch::Tensor& grad_out) {
  EXPECT_TRUE(uses_block_sparse_attention(qkv[0], qkv[1], qkv[2], bias));
  const auto out = block_sparse_attention(qkv[0], qkv[1], qkv[2], bias);
  EXPECT_EQ(out.sizes(), qkv[0].sizes());
  EXPECT_TRUE(out.is_contiguous());
  EXPECT_EQ(out.scalar_type(), qkv[0].scalar_type());
  const auto grads = torch::autograd::grad({out}, {qkv[0], qkv[1], qkv[2]}, {grad_out});
  return {out.detach(), grads[0], grads[1], grads[2]};
}

// softmax(q·kᵀ/√d + bias)·v in float64 on [B, H, S, d] permutations of the inputs. A row the bias closes whole
// gives zeros, as the kernels define it: its scores are replaced by finite ones before the softmax (so neither
// the softmax nor its gradient sees NaN) and its probabilities by zeros after.
Attended float64_truth(const std::vector<torch::Tensor>& qkv, const torch::Tensor& bias,
                       const torch::Tensor& grad_out) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : qkv) leaves.push_back(t.detach().to(torch::kFloat64).requires_grad_(true));
  const auto heads_first = [](const torch::Tensor& t) { return t.permute({0, 2, 1, 3}); };  // [B, H, S, d]
  const auto q = heads_first(leaves[0]), k = heads_first(leaves[1]), v = heads_first(leaves[2]);
  const auto b = bias.to(torch::kFloat64);
  const auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(-1))) + b;
  const auto closed = (b == kNegInf).all(-1, /*keepdim=*/true);  // [B or 1, 1, Sq, 1]
  const auto zeros = torch::zeros_like(scores);
  const auto p = torch::where(closed, zeros, torch::softmax(torch::where(closed, zeros, scores), -1));
  const auto out = torch::matmul(p, v).permute({0, 2, 1, 3});
  const auto grads = torch::autograd::grad({out}, leaves, {grad_out.to(torch::kFloat64)});
  return {out.detach(), grads[0], grads[1], grads[2]};
}

// LibTorch's own attention on the same 16-bit inputs against the truth, for context (NaN where the bias closes
// a row whole; NaN too if LibTorch refuses the inputs).
double libtorch_error(const std::vector<torch::Tensor>& qkv, const torch::Tensor& bias, const torch::Tensor& want) {
  const torch::NoGradGuard no_grad;
  try {
    const auto out = compat::scaled_dot_product_attention(qkv[0].transpose(1, 2), qkv[1].transpose(1, 2),
                                                          qkv[2].transpose(1, 2), bias);
    return relative_l2_error(out.transpose(1, 2), want);
  } catch (const std::exception&) {
    return std::nan("");
  }
}

struct Errors {
  double out = 0, dq = 0, dk = 0, dv = 0;
  double libtorch_out = 0;  // LibTorch's 16-bit attention's output error, for context
  std::string describe() const {
    std::ostringstream text;
    text << "output " << out << " (LibTorch's " << libtorch_out << "), dq " << dq << ", dk " << dk << ", dv " << dv;
    return text.str();
  }
};

// Runs the kernels and the truth on one case and expects the dtype's bounds; returns the kernels' results.
Attended expect_matches(const std::vector<torch::Tensor>& qkv, const torch::Tensor& bias, const std::string& what,
                        Errors* errors = nullptr) {
  const auto dtype = qkv[0].scalar_type();
  const auto grad_out = torch::randn(qkv[0].sizes(), on_cuda()).to(dtype);
  const Attended got = through_kernels(qkv, bias, grad_out);
  const Attended want = float64_truth(qkv, bias, grad_out);
  const Errors e{relative_l2_error(got.out, want.out), relative_l2_error(got.dq, want.dq),
                 relative_l2_error(got.dk, want.dk), relative_l2_error(got.dv, want.dv),
                 libtorch_error(qkv, bias, want.out)};
  const bool bf16 = dtype == torch::kBFloat16;
  const double out_bound = bf16 ? 6e-3 : 1e-3, grad_bound = bf16 ? 1e-2 : 2e-3;
  const std::string context = what + ", " + name_of(dtype) + ": " + e.describe();
  EXPECT_LE(e.out, out_bound) << context;
  EXPECT_LE(e.dq, grad_bound) << context;
  EXPECT_LE(e.dk, grad_bound) << context;
  EXPECT_LE(e.dv, grad_bound) << context;
  if (errors != nullptr) *errors = e;
  return got;
}

// ---- cases ----

// HY-Motion's mask (a motion band of 30 frames, padded frames and text tokens, text queries that see only text)
// over q, k, v as its attention gets them, strided views of one projection; hymotion::attention takes the kernels
// with the float32 bias the refiner hands it.
TEST_F(GpuBlockSparseAttention, MatchesOnHyMotionsMaskOverStridedViews) {
  const auto on = kernels_on();
  const int64_t batch = 3, motion = 150, text = 70, seq = motion + text, heads = 4, head_dim = 64;
  const auto lengths = [](std::vector<int64_t> valid, int64_t width) {
    return torch::arange(width, on_cuda().dtype(torch::kLong)).unsqueeze(0) <
           torch::tensor(valid, on_cuda().dtype(torch::kLong)).unsqueeze(1);
  };
  const auto bias32 = hymotion::mmdit_attention_bias(lengths({150, 97, 31}, motion), lengths({70, 12, 40}, text),
                                                     hymotion::MaskMode::narrowband, 30);
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    torch::manual_seed(1);
    const auto qkv = make_qkv(Layout::joint, batch, seq, seq, heads, head_dim, dtype);
    ASSERT_FALSE(qkv[0].is_contiguous());
    Errors e;
    const Attended got = expect_matches(qkv, bias32.to(dtype), "HY-Motion's mask", &e);
    std::cout << "HY-Motion's mask, " << name_of(dtype) << ": " << e.describe() << "\n";

    reset_fused_path_uses();
    const auto joined = hymotion::attention(qkv[0], qkv[1], qkv[2], bias32);
    const auto uses = fused_path_uses();
    ASSERT_EQ(uses.size(), 1u);
    EXPECT_EQ(uses[0].path, "block_sparse_attention");
    EXPECT_EQ(uses[0].taken, 1) << uses[0].why_not;
    EXPECT_LE(relative_l2_error(joined, got.out.view({batch, seq, heads * head_dim})), 1e-6);
    reset_fused_path_uses();
  }
}

// Random tiles closed whole, all zero and mixed, at every head dim the kernels take (fp16 at a few), over three
// contiguous tensors.
TEST_F(GpuBlockSparseAttention, MatchesOnRandomTilesAtEveryHeadDim) {
  const auto on = kernels_on();
  const int64_t batch = 2, heads = 2, seq = 200;
  for (int64_t head_dim = 8; head_dim <= 128; head_dim += 8) {
    for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
      const bool fp16_dim = head_dim == 8 || head_dim == 40 || head_dim == 64 || head_dim == 128;
      if (dtype == torch::kFloat16 && !fp16_dim) continue;
      torch::manual_seed(100 + head_dim);
      const auto bias = tiled_bias(batch, seq, dtype);
      const auto qkv = make_qkv(Layout::contiguous, batch, seq, seq, heads, head_dim, dtype);
      expect_matches(qkv, bias, "random tiles, head dim " + std::to_string(head_dim));
    }
  }
}

// Queries and keys of other lengths (partial tiles of both), k and v apart from q, a random bias per sample.
TEST_F(GpuBlockSparseAttention, MatchesWithOtherQueryAndKeyLengths) {
  const auto on = kernels_on();
  struct Lengths {
    int64_t q_len, k_len, head_dim;
  };
  for (const Lengths l : {Lengths{70, 77, 64}, Lengths{200, 136, 96}}) {
    for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
      torch::manual_seed(2);
      const auto qkv = make_qkv(Layout::own_q, 2, l.q_len, l.k_len, 3, l.head_dim, dtype);
      const auto bias = random_bias(2, l.q_len, l.k_len, 0.3, dtype);
      expect_matches(qkv, bias, "Sq " + std::to_string(l.q_len) + ", Sk " + std::to_string(l.k_len));
    }
  }
}

// One bias for every sample: a bias batch of 1, and one expanded to the batch (a batch stride of 0).
TEST_F(GpuBlockSparseAttention, MatchesWithABiasSharedByTheBatch) {
  const auto on = kernels_on();
  const int64_t batch = 3, seq = 130;
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    torch::manual_seed(3);
    const auto shared = random_bias(1, seq, seq, 0.3, dtype);
    const auto expanded = shared.expand({batch, 1, seq, seq});
    ASSERT_EQ(expanded.stride(0), 0);
    const auto qkv = make_qkv(Layout::joint, batch, seq, seq, 2, 32, dtype);
    expect_matches(qkv, shared, "a bias batch of 1");
    expect_matches(qkv, expanded, "a bias expanded to the batch");
  }
}

// An all-zero bias: every tile open without reading the bias.
TEST_F(GpuBlockSparseAttention, MatchesWithAnOpenMask) {
  const auto on = kernels_on();
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    torch::manual_seed(4);
    const auto qkv = make_qkv(Layout::joint, 2, 150, 150, 2, 64, dtype);
    expect_matches(qkv, torch::zeros({2, 1, 150, 150}, on_cuda().dtype(dtype)), "an all-zero bias");
  }
}

// Rows the bias closes whole (a few rows in one sample, a whole tile row in the other): zero output and dq rows,
// finite dk and dv that match the truth, where such a row's probabilities are zero.
TEST_F(GpuBlockSparseAttention, RowsTheBiasClosesWholeGiveZeros) {
  const auto on = kernels_on();
  struct Rows {
    int64_t sample, start, count;
  };
  const std::vector<Rows> closed{{0, 10, 10}, {0, 100, 1}, {1, 64, 64}};
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    torch::manual_seed(5);
    auto bias = random_bias(2, 150, 150, 0.3, dtype);
    for (const Rows& r : closed) bias.select(0, r.sample).narrow(1, r.start, r.count).fill_(kNegInf);
    const auto qkv = make_qkv(Layout::joint, 2, 150, 150, 2, 64, dtype);
    const Attended got = expect_matches(qkv, bias, "rows closed whole");
    for (const Rows& r : closed) {
      const auto rows = [&](const torch::Tensor& t) { return t.select(0, r.sample).narrow(0, r.start, r.count); };
      EXPECT_EQ(rows(got.out).abs().max().item<double>(), 0.0) << "sample " << r.sample << ", row " << r.start;
      EXPECT_EQ(rows(got.dq).abs().max().item<double>(), 0.0) << "sample " << r.sample << ", row " << r.start;
    }
    EXPECT_TRUE(torch::isfinite(got.dk).all().item<bool>());
    EXPECT_TRUE(torch::isfinite(got.dv).all().item<bool>());
  }
}

// What the kernels refuse falls back with why (a head dim past 128, unaligned data); float32, CPU tensors and
// calls without a bias are LibTorch's by design and not recorded.
TEST_F(GpuBlockSparseAttention, OtherInputsTakeLibTorchsAttention) {
  const auto on = kernels_on();
  const auto bf16 = on_cuda().dtype(torch::kBFloat16);
  const auto bias = torch::zeros({2, 1, 16, 16}, bf16);
  const auto expect_fallback = [&](const torch::Tensor& q, const std::string& why) {
    reset_fused_path_uses();
    EXPECT_FALSE(uses_block_sparse_attention(q, q, q, bias)) << why;
    const auto uses = fused_path_uses();
    ASSERT_EQ(uses.size(), 1u) << why;
    EXPECT_EQ(uses[0].path, "block_sparse_attention");
    EXPECT_EQ(uses[0].taken, 0);
    EXPECT_EQ(uses[0].fell_back, 1);
    EXPECT_NE(uses[0].why_not.find(why), std::string::npos) << uses[0].why_not;
  };
  expect_fallback(torch::randn({2, 16, 2, 136}, bf16), "head dim 136");
  expect_fallback(torch::randn({2, 16, 2, 72}, bf16).narrow(-1, 4, 64), "16-byte aligned");

  reset_fused_path_uses();
  const auto q32 = torch::randn({2, 16, 2, 64}, on_cuda());
  const auto q16 = q32.to(torch::kBFloat16);
  EXPECT_FALSE(uses_block_sparse_attention(q32, q32, q32, bias.to(torch::kFloat32))) << "float32";
  EXPECT_FALSE(uses_block_sparse_attention(q16.cpu(), q16.cpu(), q16.cpu(), bias.cpu())) << "CPU";
  EXPECT_FALSE(uses_block_sparse_attention(q16, q16, q16, torch::Tensor())) << "no bias";
  EXPECT_TRUE(fused_path_uses().empty());
  EXPECT_TRUE(uses_block_sparse_attention(q16, q16, q16, bias)) << "the same shapes in bf16 with a bias";
  reset_fused_path_uses();
}

// Switched off (the default: [engine.kernels] block_sparse_attention = false) the attention is LibTorch's by
// design, not a fallback: nothing is recorded, and hymotion::attention gives LibTorch's result.
TEST_F(GpuBlockSparseAttention, SwitchedOffTakesLibTorchsAttention) {
  const ScopedSwitch off(block_sparse_attention_enabled, set_block_sparse_attention, false);
  const auto bf16 = on_cuda().dtype(torch::kBFloat16);
  torch::manual_seed(6);
  const auto qkv = make_qkv(Layout::joint, 2, 16, 16, 2, 64, torch::kBFloat16);
  const auto bias = torch::zeros({2, 1, 16, 16}, bf16);
  reset_fused_path_uses();
  EXPECT_FALSE(uses_block_sparse_attention(qkv[0], qkv[1], qkv[2], bias));
  const auto joined = hymotion::attention(qkv[0], qkv[1], qkv[2], bias);
  EXPECT_TRUE(fused_path_uses().empty());
  const auto libtorchs = compat::scaled_dot_product_attention(qkv[0].transpose(1, 2), qkv[1].transpose(1, 2),
                                                              qkv[2].transpose(1, 2), bias)
                             .transpose(1, 2)
                             .reshape({2, 16, -1});
  EXPECT_LE(relative_l2_error(joined, libtorchs), 1e-6);  // the kernels' bf16 result differs by ~1e-3
  reset_fused_path_uses();
}

}  // namespace
}  // namespace zest::testing
