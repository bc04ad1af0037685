// The model kernels on the GPU (ctest label `gpu`), each against ATen's op-by-op form through autograd:
// the channels-last group norm (+SiLU, with and without a per-sample channel shift) for the group sizes the
// UNets use (10..80 channels), odd spatial sizes, float32 and bf16, bitwise repeatable; GEGLU; the affine layer
// norm (zest's row kernels, and ATen's in the compute dtype); RoPE; the per-head RMSNorm; the modulated layer norm; the gated residual;
// [attention | GELU_tanh(MLP half)].
#include "common/tensor_close.h"
#include "kernels/fused_paths.h"
#include "kernels/concat_gelu_op.h"
#include "models/common/fused_norms.h"
#include "kernels/gated_residual_op.h"
#include "kernels/geglu_op.h"
#include "kernels/layer_norm_modulate_op.h"
#include "kernels/rms_norm_op.h"
#include "kernels/rope_op.h"
#include "models/hymotion/layers.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zest::testing {
namespace {

struct Case {
  int64_t n, c, h, w, groups;
};

struct Result {
  torch::Tensor y, dx, dweight, dbias;
};

// The group norm's results, and the shift's gradient when it has one.
struct GroupNormResult {
  torch::Tensor y, dx, dweight, dbias, dshift;
};

// A copy of t that requires its gradient (undefined stays undefined).
torch::Tensor leaf(const torch::Tensor& t, torch::ScalarType dtype) {
  return t.defined() ? t.detach().to(dtype).clone().requires_grad_(true) : t;
}

// zest's kernels on x (+ shift [n, c] when defined).
GroupNormResult run_zest(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
                         const torch::Tensor& shift0, const torch::Tensor& r, int64_t groups, bool silu) {
  const auto dtype = x0.scalar_type();
  auto x = leaf(x0, dtype), w = leaf(w0, dtype), b = leaf(b0, dtype), shift = leaf(shift0, dtype);
  EXPECT_TRUE(uses_group_norm_kernels(x, w, b, groups, shift));
  auto y = group_norm_silu(x, groups, w, b, 1e-5, silu, shift);
  EXPECT_TRUE(y.is_contiguous(at::MemoryFormat::ChannelsLast));
  (y.to(torch::kFloat32) * r).sum().backward();
  return {y.detach(), x.grad(), w.grad(), b.grad(), shift.defined() ? shift.grad() : torch::Tensor()};
}

// ATen's float32 group norm of x + shift, the sum written and broadcast.
GroupNormResult run_reference(const torch::Tensor& x0, const torch::Tensor& w0, const torch::Tensor& b0,
                              const torch::Tensor& shift0, const torch::Tensor& r, int64_t groups, bool silu) {
  auto x = leaf(x0.contiguous(), torch::kFloat32), w = leaf(w0, torch::kFloat32), b = leaf(b0, torch::kFloat32);
  auto shift = leaf(shift0, torch::kFloat32);
  auto y = torch::group_norm(shift.defined() ? x + shift.view({x.size(0), x.size(1), 1, 1}) : x, groups, w, b, 1e-5);
  if (silu) y = torch::silu(y);
  (y * r).sum().backward();
  return {y.detach(), x.grad(), w.grad(), b.grad(), shift.defined() ? shift.grad() : torch::Tensor()};
}

// One case against ATen's float32 ops: values, gradients, and the same bits when run again.
void expect_group_norm_matches(const Case& k, torch::ScalarType dtype, bool silu, bool shifted) {
  SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " shape [" << k.n << ", " << k.c << ", " << k.h << ", "
                                    << k.w << "] groups " << k.groups << " silu " << silu << " shifted " << shifted);
  const double tolerance = dtype == torch::kFloat32 ? 1e-4 : 2e-2;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  // An offset and a scale per channel, so a variance formula that cancels would show.
  const auto x = (torch::randn({k.n, k.c, k.h, k.w}, cuda) * 3 + torch::randn({1, k.c, 1, 1}, cuda) * 5)
                     .to(dtype)
                     .contiguous(at::MemoryFormat::ChannelsLast);
  const auto w = (1 + 0.5 * torch::randn({k.c}, cuda)).to(dtype);
  const auto b = (0.5 * torch::randn({k.c}, cuda)).to(dtype);
  // A shift per sample and channel as large as the spread, so a shift left out or counted twice shows.
  const auto shift = shifted ? (3 * torch::randn({k.n, k.c}, cuda)).to(dtype) : torch::Tensor();
  const auto r = torch::randn({k.n, k.c, k.h, k.w}, cuda);
  const GroupNormResult got = run_zest(x, w, b, shift, r, k.groups, silu);
  const GroupNormResult want = run_reference(x, w, b, shift, r, k.groups, silu);
  EXPECT_LE(relative_max_error(got.y, want.y), tolerance);
  EXPECT_LE(relative_max_error(got.dx, want.dx), tolerance);
  EXPECT_LE(relative_max_error(got.dweight, want.dweight), tolerance);
  EXPECT_LE(relative_max_error(got.dbias, want.dbias), tolerance);
  if (shifted) {
    EXPECT_LE(relative_max_error(got.dshift, want.dshift), tolerance);
  }
  const GroupNormResult again = run_zest(x, w, b, shift, r, k.groups, silu);
  EXPECT_TRUE(got.y.equal(again.y) && got.dx.equal(again.dx) && got.dweight.equal(again.dweight));
  if (shifted) {
    EXPECT_TRUE(got.dshift.equal(again.dshift));
  }
}

TEST(GpuGroupNorm, ChannelsLastKernelsMatchAtenInFloat32AndBf16) {
  torch::manual_seed(7);
  const std::vector<Case> cases = {{3, 320, 16, 16, 32}, {2, 2560, 8, 8, 32}, {2, 960, 5, 7, 32},
                                   {2, 1920, 9, 4, 32},  {2, 640, 130, 3, 32}, {2, 8, 3, 3, 4}};
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& k : cases) {
      for (const bool silu : {false, true}) {
        for (const bool shifted : {false, true}) expect_group_norm_matches(k, dtype, silu, shifted);
      }
    }
  }
}

// NCHW activations keep ATen's path (the kernels take channels-last only).
TEST(GpuGroupNorm, NchwActivationsUseAten) {
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  const auto x = torch::randn({2, 64, 8, 8}, cuda);
  EXPECT_FALSE(uses_group_norm_kernels(x, torch::ones({64}, cuda), torch::zeros({64}, cuda), 32));
  EXPECT_TRUE(uses_group_norm_kernels(x.contiguous(at::MemoryFormat::ChannelsLast), torch::ones({64}, cuda),
                                      torch::zeros({64}, cuda), 32));
}

TEST(GpuGeglu, KernelsMatchAtenOps) {
  torch::manual_seed(11);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& sizes : std::vector<std::vector<int64_t>>{{3, 77, 2 * 640}, {4, 10}, {2, 9, 2 * 1283}}) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " last dim " << sizes.back());
      const auto cuda = torch::TensorOptions().device(torch::kCUDA);
      const auto proj = (2 * torch::randn(sizes, cuda)).to(dtype);
      auto out_sizes = sizes;
      out_sizes.back() /= 2;
      const auto r = torch::randn(out_sizes, cuda);
      auto ours = proj.clone().requires_grad_(true);
      ASSERT_TRUE(uses_geglu_kernels(ours));
      const auto y = geglu(ours);
      (y.to(torch::kFloat32) * r).sum().backward();
      auto theirs = proj.clone().requires_grad_(true);
      const auto halves = theirs.chunk(2, -1);
      const auto y_ref = halves[0] * torch::gelu(halves[1]);
      (y_ref.to(torch::kFloat32) * r).sum().backward();
      const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 1e-2;
      EXPECT_LE(relative_max_error(y, y_ref), tolerance);
      EXPECT_LE(relative_max_error(ours.grad(), theirs.grad()), tolerance);
    }
  }
}

// The affine layer norm on CUDA tensors — zest's row kernels, and with [engine.kernels] layer_norm_kernels off
// ATen's kernels in their float32 accumulate type — gives the values of the float32 path the CPU runs, output
// and gradients: the UNets' widths (320, 640, 1280), widths whose last threads hold less (200, 1000), and rows
// enough that every backward tile sums several.
TEST(GpuLayerNorm, KernelsAndAtenMatchTheFloat32Path) {
  torch::manual_seed(5);
  struct Shape {
    int64_t batch, seq, d;
  };
  const std::vector<Shape> shapes = {{4, 300, 320}, {2, 77, 640}, {3, 50, 1280}, {2, 33, 200},
                                     {2, 41, 1000}, {2, 4096, 320}, {1, 3000, 1280}};
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    const double tolerance = dtype == torch::kFloat32 ? 1e-4 : 1e-2;
    for (const auto [batch, seq, d] : shapes) {
      for (const bool kernels : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " [" << batch << ", " << seq << ", " << d
                                          << "] kernels " << kernels);
        set_layer_norm_kernels(kernels);
        const auto x = (torch::randn({batch, seq, d}) * 2 + 1).to(dtype);
        const auto w = (1 + 0.3 * torch::randn({d})).to(dtype);
        const auto b = (0.3 * torch::randn({d})).to(dtype);
        const auto r = torch::randn({batch, seq, d});
        Result got, want;
        for (auto* result : {&got, &want}) {
          const auto device = result == &got ? torch::kCUDA : torch::kCPU;
          auto xx = x.to(device).requires_grad_(true);
          auto ww = w.to(device).requires_grad_(true);
          auto bb = b.to(device).requires_grad_(true);
          EXPECT_EQ(uses_layer_norm_affine_kernels(xx, ww, bb), kernels && device == torch::kCUDA);
          const auto y = layer_norm_affine(xx, ww, bb, 1e-5);
          EXPECT_EQ(y.scalar_type(), dtype);
          (y.to(torch::kFloat32) * r.to(device)).sum().backward();
          *result = {y.detach().cpu(), xx.grad().cpu(), ww.grad().cpu(), bb.grad().cpu()};
        }
        EXPECT_LE(relative_max_error(got.y, want.y), tolerance);
        EXPECT_LE(relative_max_error(got.dx, want.dx), tolerance);
        EXPECT_LE(relative_max_error(got.dweight, want.dweight), tolerance);
        EXPECT_LE(relative_max_error(got.dbias, want.dbias), tolerance);
      }
    }
  }
  set_layer_norm_kernels(true);
}

// HY-Motion's RoPE on CUDA (the kernels) against the same function on the CPU (ATen's ops), with all
// positions rotated and with only the motion tokens rotated, in float32 and bf16.
TEST(GpuRope, KernelsMatchTheCpuPath) {
  torch::manual_seed(3);
  const auto rope = hymotion::Rope::make(100, 64);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const int64_t rotated : {100, 70}) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " rotated " << rotated);
      const auto cos = rope.cos.narrow(0, 0, rotated).contiguous();
      const auto sin = rope.sin.narrow(0, 0, rotated).contiguous();
      const auto x = torch::randn({2, 100, 4, 64}).to(dtype);
      const auto r = torch::randn({2, 100, 4, 64});
      Result got, want;
      for (auto* result : {&got, &want}) {
        const auto device = result == &got ? torch::kCUDA : torch::kCPU;
        auto xx = x.to(device).requires_grad_(true);
        const auto c = cos.to(device), s = sin.to(device);
        EXPECT_EQ(uses_rope_kernels(xx, c, s), device == torch::kCUDA);
        const auto y = hymotion::apply_rope(xx, c, s);
        (y.to(torch::kFloat32) * r.to(device)).sum().backward();
        *result = {y.detach().cpu(), xx.grad().cpu(), {}, {}};
      }
      const double tolerance = dtype == torch::kFloat32 ? 1e-6 : 1e-2;
      EXPECT_LE(relative_max_error(got.y, want.y), tolerance);
      EXPECT_LE(relative_max_error(got.dx, want.dx), tolerance);
    }
  }
}

// The per-head RMSNorm on q as a view of a qkv projection (rows strided, d contiguous), against the
// reference's op-by-op form on the CPU, output and the gradients of x and the weight.
// Head dims filling whole lanes (32, 64, 128, 256) and leaving the last lanes' slots empty (8, 40, 96, 200).
TEST(GpuRmsNorm, KernelsMatchTheOpByOpForm) {
  torch::manual_seed(9);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const int64_t d : {64, 128, 8, 32, 40, 96, 200, 256}) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " head dim " << d);
      const int64_t heads = 4;
      const auto qkv = (torch::randn({3, 50, 3 * heads * d}) * 3).to(dtype);
      const auto w = (1 + 0.3 * torch::randn({d})).to(dtype);
      const auto r = torch::randn({3, 50, heads, d});
      Result got, want;
      for (auto* result : {&got, &want}) {
        const bool gpu = result == &got;
        auto proj = qkv.to(gpu ? torch::kCUDA : torch::kCPU).requires_grad_(true);
        auto ww = w.to(proj.device()).requires_grad_(true);
        const auto q = proj.view({3, 50, 3, heads, d}).unbind(2)[0];
        EXPECT_EQ(uses_rms_norm_kernels(q, ww), gpu);
        torch::Tensor y;
        if (gpu) {
          y = rms_norm_with_kernels(q, ww, 1e-6);
        } else {
          const auto xf = q.to(torch::kFloat32);
          y = (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6)).to(dtype) * ww;
        }
        (y.to(torch::kFloat32) * r.to(proj.device())).sum().backward();
        *result = {y.detach().cpu(), proj.grad().cpu(), ww.grad().cpu(), {}};
      }
      const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 2e-2;
      EXPECT_LE(relative_max_error(got.y, want.y), tolerance);
      EXPECT_LE(relative_max_error(got.dx, want.dx), tolerance);
      EXPECT_LE(relative_max_error(got.dweight, want.dweight), tolerance);
    }
  }
}

// HY-Motion's modulated layer norm with shift and scale as chunks of one modulation output (strided
// per sample, D contiguous), against the op chain autocast computes (float32 layer norm, 1 + scale in the
// activation dtype, float32 modulation, one rounding) on the CPU: output and the gradients of x, shift and
// scale. Widths split evenly over 32 to 384 threads (256, 768, HY-Motion's 1280, 2048, 3072) and widths
// whose last threads hold less or nothing (200, 288, 1000, 1088, 1152, 4104); three of them also with rows
// enough that every block of the forward and backward takes several (its next row loaded ahead).
TEST(GpuLayerNormModulate, KernelsMatchTheOpChain) {
  torch::manual_seed(11);
  struct Shape {
    int64_t batch, seq, d;
  };
  std::vector<Shape> shapes;
  for (const int64_t d : {256, 768, 1280, 2048, 3072, 200, 288, 1000, 1088, 1152, 4104}) shapes.push_back({3, 37, d});
  for (const int64_t d : {1280, 200, 3072}) shapes.push_back({5, 6000, d});
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto [batch, seq, d] : shapes) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " width " << d << " rows " << batch << "x" << seq);
      const auto x0 = (torch::randn({batch, seq, d}) * 2 + 0.5).to(dtype);
      const auto mod0 = (0.5 * torch::randn({batch, 1, 6 * d})).to(dtype);
      const auto r = torch::randn({batch, seq, d});
      Result got, want;
      torch::Tensor got_dmod, want_dmod;
      for (auto* result : {&got, &want}) {
        const bool gpu = result == &got;
        const auto device = gpu ? torch::kCUDA : torch::kCPU;
        auto x = x0.to(device).requires_grad_(true);
        auto mod = mod0.to(device).requires_grad_(true);
        const auto chunks = mod.chunk(6, -1);
        const auto& shift = chunks[3];
        const auto& scale = chunks[4];
        torch::Tensor y;
        if (gpu) {
          EXPECT_TRUE(uses_layer_norm_modulate_kernels(x, shift, scale));
          y = layer_norm_modulate(x, shift, scale, 1e-6);
        } else {
          const auto normed = torch::layer_norm(x.to(torch::kFloat32), {d}, {}, {}, 1e-6);
          y = (normed * (1 + scale).to(torch::kFloat32) + shift.to(torch::kFloat32)).to(dtype);
        }
        EXPECT_EQ(y.scalar_type(), dtype);
        (y.to(torch::kFloat32) * r.to(device)).sum().backward();
        *result = {y.detach().cpu(), x.grad().cpu(), {}, {}};
        (gpu ? got_dmod : want_dmod) = mod.grad().cpu();
      }
      const double tolerance = dtype == torch::kFloat32 ? 2e-5 : 2e-2;
      EXPECT_LE(relative_max_error(got.y, want.y), tolerance);
      EXPECT_LE(relative_max_error(got.dx, want.dx), tolerance);
      EXPECT_LE(relative_max_error(got_dmod.narrow(-1, 3 * d, d), want_dmod.narrow(-1, 3 * d, d)), tolerance);  // shift
      EXPECT_LE(relative_max_error(got_dmod.narrow(-1, 4 * d, d), want_dmod.narrow(-1, 4 * d, d)), tolerance);  // scale
      EXPECT_EQ(got_dmod.narrow(-1, 0, 3 * d).abs().max().item<double>(), 0.0);  // the unused chunks
    }
  }
}

// Past 8192 columns (512 threads of 16) the op chain runs, and the fallback is recorded with its reason.
TEST(GpuLayerNormModulate, AWidthPastTheKernelsFallsBackAndSaysWhy) {
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto x = torch::randn({1, 3, 8200}, cuda);
  const auto mod = torch::randn({1, 1, 2 * 8200}, cuda).chunk(2, -1);
  reset_fused_path_uses();
  EXPECT_FALSE(uses_layer_norm_modulate_kernels(x, mod[0], mod[1]));
  const auto lines = fused_path_fallback_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("layer_norm_modulate"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("width 8200 not covered"), std::string::npos) << lines[0];
  const auto y = layer_norm_modulate(x, mod[0], mod[1], 1e-6);  // the op chain
  EXPECT_EQ(y.sizes(), x.sizes());
  reset_fused_path_uses();
}

// Bitwise repeatable: the column sums of backward go in a fixed order.
TEST(GpuLayerNormModulate, KernelsRepeatBitwise) {
  torch::manual_seed(12);
  const auto cuda = torch::kCUDA;
  const auto x0 = torch::randn({4, 300, 1280}, cuda).to(torch::kBFloat16);
  const auto mod0 = (0.3 * torch::randn({4, 1, 2560}, cuda)).to(torch::kBFloat16);
  std::vector<torch::Tensor> runs;
  for (int run = 0; run < 2; ++run) {
    auto x = x0.clone().requires_grad_(true);
    auto mod = mod0.clone().requires_grad_(true);
    const auto chunks = mod.chunk(2, -1);
    ASSERT_TRUE(uses_layer_norm_modulate_kernels(x, chunks[0], chunks[1]));
    const auto y = layer_norm_modulate(x, chunks[0], chunks[1], 1e-6);
    y.to(torch::kFloat32).pow(2).sum().backward();
    runs.push_back(torch::cat({y.flatten(), x.grad().flatten(), mod.grad().flatten()}));
  }
  EXPECT_TRUE(runs[0].equal(runs[1]));
}

// Packed rows (kernels/packed_samples.h) of samples of 37, 0, 1, 2900 and 640 valid rows (a sample with none,
// one with a single row, several tiles' worth) padded to `longest`: the valid rows' flat indices in [B·longest]
// and their SampleRows, on the GPU.
struct PackedCase {
  static constexpr int64_t batch = 5, longest = 2900;
  torch::Tensor rows;
  SampleRows samples;

  // r [B·longest, D] with the padded rows zeroed: the padded kernels' output weights that match the packed ones.
  torch::Tensor padded_weights(const torch::Tensor& r) const {
    return torch::zeros_like(r).index_copy_(0, rows, r.index_select(0, rows));
  }
  // The packed rows [N, D] of a padded [B, longest, D] (or [B·longest, D]) tensor.
  torch::Tensor packed(const torch::Tensor& padded) const {
    return padded.reshape({-1, padded.size(-1)}).index_select(0, rows);
  }
  // The packed run's modulation gradient against the padded run's: within a sum's rounding in another order,
  // and none for the sample with no rows.
  static void expect_modulation_grads_match(const torch::Tensor& packed_grad, const torch::Tensor& padded_grad,
                                            torch::ScalarType dtype) {
    const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 1e-2;
    EXPECT_LE(relative_max_error(packed_grad.cpu(), padded_grad.cpu()), tolerance);
    EXPECT_EQ(packed_grad[1].abs().max().item<double>(), 0.0);
  }
};

PackedCase packed_case() {
  const std::vector<int64_t> lengths{37, 0, 1, 2900, 640};
  const int64_t longest = PackedCase::longest;
  const auto counts = torch::tensor(lengths, torch::kLong);
  const auto valid = torch::arange(longest).unsqueeze(0) < counts.unsqueeze(1);
  PackedCase c;
  c.rows = valid.flatten().nonzero().squeeze(1).to(torch::kCUDA);
  c.samples.starts = torch::cat({torch::zeros({1}, torch::kLong), counts.cumsum(0)}).to(torch::kInt).to(torch::kCUDA);
  c.samples.sample = torch::repeat_interleave(torch::arange(counts.size(0)), counts).to(torch::kCUDA);
  c.samples.longest = counts.max().item<int64_t>();
  return c;
}

// Packed rows against the same rows padded, both through the kernels: the outputs and the rows' gradients
// bitwise (a row's result depends on that row and its sample only), shift's and scale's gradients within a
// sum's rounding in another order (the padded rows' gradients are zero). Samples of 0 rows, one row and
// several tiles' worth; widths of packs of 8 and of 1.
TEST(GpuLayerNormModulate, PackedRowsMatchThePaddedKernels) {
  torch::manual_seed(13);
  const PackedCase pc = packed_case();
  const int64_t batch = PackedCase::batch, longest = PackedCase::longest;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const int64_t d : {1280, 200, 77 * 8}) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " width " << d);
      const auto cuda = torch::TensorOptions().device(torch::kCUDA);
      const auto x0 = (torch::randn({batch, longest, d}, cuda) * 2 + 0.5).to(dtype);
      const auto mod0 = (0.5 * torch::randn({batch, 1, 2 * d}, cuda)).to(dtype);
      const auto r = torch::randn({batch * longest, d}, cuda);
      const auto r_padded = pc.padded_weights(r);

      auto x = x0.clone().requires_grad_(true);
      auto mod = mod0.clone().requires_grad_(true);
      auto chunks = mod.chunk(2, -1);
      ASSERT_TRUE(uses_layer_norm_modulate_kernels(x, chunks[0], chunks[1]));
      const auto y = layer_norm_modulate(x, chunks[0], chunks[1], 1e-6);
      (y.to(torch::kFloat32).view({-1, d}) * r_padded).sum().backward();

      auto xp = pc.packed(x0).requires_grad_(true);
      auto modp = mod0.clone().requires_grad_(true);
      const auto chunks_p = modp.chunk(2, -1);
      ASSERT_TRUE(uses_layer_norm_modulate_kernels(xp, chunks_p[0], chunks_p[1], &pc.samples));
      const auto yp = layer_norm_modulate(xp, chunks_p[0], chunks_p[1], 1e-6, &pc.samples);
      (yp.to(torch::kFloat32) * pc.packed(r)).sum().backward();

      EXPECT_TRUE(yp.detach().equal(pc.packed(y.detach())));
      EXPECT_TRUE(xp.grad().equal(pc.packed(x.grad())));
      PackedCase::expect_modulation_grads_match(modp.grad(), mod.grad(), dtype);
    }
  }
}

TEST(GpuGatedResidual, PackedRowsMatchThePaddedKernels) {
  torch::manual_seed(23);
  const PackedCase pc = packed_case();
  const int64_t batch = PackedCase::batch, longest = PackedCase::longest;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const int64_t d : {1280, 77}) {
      SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " width " << d);
      const auto cuda = torch::TensorOptions().device(torch::kCUDA);
      const auto x0 = torch::randn({batch, longest, d}, cuda).to(dtype);
      const auto y0 = torch::randn({batch, longest, d}, cuda).to(dtype);
      const auto mod0 = (0.5 * torch::randn({batch, 1, 3 * d}, cuda)).to(dtype);
      const auto r = torch::randn({batch * longest, d}, cuda);
      const auto r_padded = pc.padded_weights(r);

      auto y = y0.clone().requires_grad_(true);
      auto mod = mod0.clone().requires_grad_(true);
      const auto gate = mod.chunk(3, -1)[2];
      ASSERT_TRUE(uses_gated_residual_kernels(x0, y, gate));
      const auto z = gated_residual(x0, y, gate);
      (z.to(torch::kFloat32).view({-1, d}) * r_padded).sum().backward();

      const auto xp = pc.packed(x0);
      auto yp = pc.packed(y0).requires_grad_(true);
      auto modp = mod0.clone().requires_grad_(true);
      const auto gate_p = modp.chunk(3, -1)[2];
      ASSERT_TRUE(uses_gated_residual_kernels(xp, yp, gate_p, &pc.samples));
      const auto zp = gated_residual(xp, yp, gate_p, &pc.samples);
      (zp.to(torch::kFloat32) * pc.packed(r)).sum().backward();

      EXPECT_TRUE(zp.detach().equal(pc.packed(z.detach())));
      EXPECT_TRUE(yp.grad().equal(pc.packed(y.grad())));
      PackedCase::expect_modulation_grads_match(modp.grad(), mod.grad(), dtype);
    }
  }
}

// x + y·gate against ATen's two ops on the same GPU: the output and y's gradient bitwise (the same two
// roundings), the gate's gradient within the rounding of a sum taken in another order. Widths that take
// packs of 8, 4 and 1 elements; 37 tokens (a row per tile) and 1000 (several rows per tile).
TEST(GpuGatedResidual, KernelsMatchTheOpChain) {
  torch::manual_seed(21);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16, torch::kFloat16}) {
    for (const int64_t d : {1280, 200, 77}) {
      for (const int64_t seq : {37, 1000}) {
        SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " width " << d << " tokens " << seq);
        const auto opts = torch::TensorOptions().device(torch::kCUDA);
        const auto x0 = torch::randn({3, seq, d}, opts).to(dtype);
        const auto y0 = torch::randn({3, seq, d}, opts).to(dtype);
        const auto mod0 = (0.5 * torch::randn({3, 1, 6 * d}, opts)).to(dtype);
        const auto r = torch::randn({3, seq, d}, opts);
        std::vector<torch::Tensor> out, dx, dy, dmod;
        for (const bool kernels : {true, false}) {
          auto x = x0.clone().requires_grad_(true);
          auto y = y0.clone().requires_grad_(true);
          auto mod = mod0.clone().requires_grad_(true);
          const auto gate = mod.chunk(6, -1)[2];
          torch::Tensor z;
          if (kernels) {
            EXPECT_TRUE(uses_gated_residual_kernels(x, y, gate));
            z = gated_residual(x, y, gate);
          } else {
            z = x + y * gate;
          }
          (z.to(torch::kFloat32) * r).sum().backward();
          out.push_back(z.detach());
          dx.push_back(x.grad());
          dy.push_back(y.grad());
          dmod.push_back(mod.grad());
        }
        EXPECT_TRUE(out[0].equal(out[1]));
        EXPECT_TRUE(dx[0].equal(dx[1]));
        EXPECT_TRUE(dy[0].equal(dy[1]));
        const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 1e-2;
        EXPECT_LE(relative_max_error(dmod[0].narrow(-1, 2 * d, d), dmod[1].narrow(-1, 2 * d, d)), tolerance);
        EXPECT_EQ(dmod[0].narrow(-1, 0, 2 * d).abs().max().item<double>(), 0.0);  // the other chunks
      }
    }
  }
  // Operands the kernels do not take go to ATen: mixed dtypes, a gate per token.
  const auto x = torch::randn({2, 5, 64}, torch::kCUDA);
  EXPECT_FALSE(uses_gated_residual_kernels(x, x.to(torch::kBFloat16), torch::randn({2, 1, 64}, torch::kCUDA)));
  EXPECT_FALSE(uses_gated_residual_kernels(x, x, torch::randn({2, 5, 64}, torch::kCUDA)));
  EXPECT_TRUE(gated_residual(x, x, torch::randn({2, 5, 64}, torch::kCUDA)).defined());
}

// Bitwise repeatable: the gate's column sums go in a fixed order.
TEST(GpuGatedResidual, KernelsRepeatBitwise) {
  torch::manual_seed(22);
  const auto x0 = torch::randn({4, 488, 1280}, torch::kCUDA).to(torch::kBFloat16);
  const auto mod0 = torch::randn({4, 1, 3 * 1280}, torch::kCUDA).to(torch::kBFloat16);
  std::vector<torch::Tensor> runs;
  for (int run = 0; run < 2; ++run) {
    auto x = x0.clone().requires_grad_(true);
    auto mod = mod0.clone().requires_grad_(true);
    const auto z = gated_residual(x, x0 * 0.5, mod.chunk(3, -1)[2]);
    z.to(torch::kFloat32).pow(2).sum().backward();
    runs.push_back(torch::cat({z.flatten(), x.grad().flatten(), mod.grad().flatten()}));
  }
  EXPECT_TRUE(runs[0].equal(runs[1]));
}

// [left | GELU_tanh(right)] with right a slice of a projection (HY-Motion's single-stream block) against
// ATen's GELU and concatenation on the same GPU, forward and both gradients; a left with its own row
// stride; widths that take packs of 8, 4 and 1.
// [B, L, ·] halves, and packed rows [N, ·] (HY-Motion's packed valid tokens).
TEST(GpuConcatGelu, KernelsMatchTheOpChain) {
  torch::manual_seed(23);
  struct Widths {
    int64_t left, right;
  };
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const Widths w : {Widths{1280, 5120}, Widths{64, 256}, Widths{20, 36}, Widths{7, 13}}) {
      for (const bool strided_left : {false, true}) {
        for (const bool packed : {false, true}) {
          SCOPED_TRACE(::testing::Message() << "dtype " << dtype << " widths " << w.left << "+" << w.right
                                            << (strided_left ? " strided left" : "") << (packed ? " packed" : ""));
          const auto opts = torch::TensorOptions().device(torch::kCUDA);
          const auto rows = [&](int64_t width) {
            return packed ? std::vector<int64_t>{66, width} : std::vector<int64_t>{2, 33, width};
          };
          const auto h0 = (2 * torch::randn(rows(3 * w.left + w.right), opts)).to(dtype);
          const auto o0 = torch::randn(rows(strided_left ? 2 * w.left : w.left), opts).to(dtype);
          const auto r = torch::randn(rows(w.left + w.right), opts);
          std::vector<torch::Tensor> out, dh, dot;
          for (const bool kernels : {true, false}) {
            auto h = h0.clone().requires_grad_(true);
            auto o_full = o0.clone().requires_grad_(true);
            const auto o = o_full.narrow(-1, 0, w.left);
            const auto right = h.narrow(-1, 3 * w.left, w.right);
            torch::Tensor y;
            if (kernels) {
              EXPECT_TRUE(uses_concat_gelu_kernels(o, right));
              y = concat_gelu_tanh(o, right);
            } else {
              y = torch::cat({o, torch::gelu(right, "tanh")}, -1);
            }
            (y.to(torch::kFloat32) * r).sum().backward();
            out.push_back(y.detach());
            dh.push_back(h.grad());
            dot.push_back(o_full.grad());
          }
          EXPECT_EQ(out[0].sizes(), out[1].sizes());
          EXPECT_TRUE(out[0].is_contiguous());
          const double tolerance = dtype == torch::kFloat32 ? 1e-6 : 1e-2;
          EXPECT_LE(relative_max_error(out[0], out[1]), tolerance);
          EXPECT_LE(relative_max_error(dh[0], dh[1]), tolerance);
          EXPECT_TRUE(dot[0].equal(dot[1]));  // the output's gradient, passed through
          EXPECT_EQ(dh[0].narrow(-1, 0, 3 * w.left).abs().max().item<double>(), 0.0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace zest::testing
