// The fp8 products (kernels/fp8_product.h, kernels/linear_products.h; [engine] matmul = "fp8") on the GPU:
// the casts scale by the tensor's absolute maximum and round as PyTorch's own fp8 casts do (transposed too,
// from a column block, NaN kept, zeros kept); the products equal the float64 products of their dequantised
// operands with each epilogue (bias, GELU_AUX_BIAS, DGELU, accumulation) at shapes that are not the
// release's; a Linear trained with fp8 runs its forward and input-gradient products in fp8 (its error is
// fp8's, not bf16's) and says where a width keeps it in bf16; the run file's key reaches the products; and a
// HY-Motion model at a config that is not the release trains through every fused path with fp8 products,
// tracking float32.
#include "common/scoped_switch.h"
#include "common/tensor_close.h"
#include "hymotion/hymotion_test_util.h"
#include "kernels/fp8_product.h"
#include "kernels/fused_paths.h"
#include "kernels/linear_op.h"
#include "kernels/matmul_precision.h"
#include "train/bench.h"
#include "train/run_config.h"

#include <gtest/gtest.h>

#include <iostream>

namespace zest::testing {
namespace {

ScopedSwitch fp8_switch(bool on) { return {fp8_training_products, set_fp8_training_products, on}; }

const auto kCuda = torch::TensorOptions().device(torch::kCUDA);

torch::ScalarType torch_fp8(Fp8Format f) {
  return f == Fp8Format::e4m3 ? c10::ScalarType::Float8_e4m3fn : c10::ScalarType::Float8_e5m2;
}

// The values an Fp8Matrix stands for, in float64.
torch::Tensor dequantised(const Fp8Matrix& m) {
  return m.data.view(torch_fp8(m.format)).to(torch::kFloat64) * m.scale_inv.to(torch::kFloat64);
}

float scale_inv_of(const Fp8Matrix& m) { return m.scale_inv.item<float>(); }

// PyTorch's own cast of x·(largest / amax) (round to nearest even), as bits.
torch::Tensor torch_cast_bits(const torch::Tensor& x, Fp8Format f) {
  const auto amax = x.abs().max().to(torch::kFloat32);
  const auto scale = torch::full({}, fp8_largest(f), kCuda.dtype(torch::kFloat32)) / amax;
  return (x.to(torch::kFloat32) * scale).to(torch_fp8(f)).view(torch::kByte);
}

TEST(GpuFp8, CastsScaleByTheAbsoluteMaximumAndRoundAsPyTorch) {
  torch::manual_seed(1);
  for (const Fp8Format f : {Fp8Format::e4m3, Fp8Format::e5m2}) {
    SCOPED_TRACE(f == Fp8Format::e4m3 ? "e4m3" : "e5m2");
    // 3000 rows: many blocks of the grid-stride kernels; a column block of a wider matrix: rows 216 apart.
    const auto wide = torch::randn({3000, 216}, kCuda.dtype(torch::kBFloat16)) * 3;
    for (const auto& x : {wide, wide.narrow(1, 40, 136), wide.narrow(1, 3, 45)}) {
      SCOPED_TRACE(::testing::Message() << "cols " << x.size(1) << ", row stride " << x.stride(0));
      const Fp8Matrix m = to_fp8(x, f);
      const float amax = x.abs().max().to(torch::kFloat32).item<float>();
      EXPECT_EQ(scale_inv_of(m), 1.0f / (fp8_largest(f) / amax));
      EXPECT_TRUE(torch::equal(m.data, torch_cast_bits(x, f))) << "rounded as PyTorch's cast";
      const Fp8Matrix t = to_fp8(x, f, /*transposed=*/true);
      EXPECT_EQ(t.data.sizes(), (std::vector<int64_t>{x.size(1), x.size(0)}));
      EXPECT_TRUE(torch::equal(t.data, m.data.t().contiguous())) << "the transposed cast is the cast, transposed";
      EXPECT_EQ(scale_inv_of(t), scale_inv_of(m));
      // Every element within half a step of its format (3 or 2 mantissa bits) of what it stands for.
      const double step = f == Fp8Format::e4m3 ? 1.0 / 8 : 1.0 / 4;
      const auto err = (dequantised(m) - x.to(torch::kFloat64)).abs();
      const auto allowed = x.to(torch::kFloat64).abs() * (step / 2) + scale_inv_of(m) * 1e-2;
      EXPECT_TRUE((err <= allowed).all().item<bool>());
    }
  }
  const Fp8Matrix zeros = to_fp8(torch::zeros({64, 32}, kCuda.dtype(torch::kBFloat16)), Fp8Format::e4m3);
  EXPECT_EQ(scale_inv_of(zeros), 1.0f);
  EXPECT_EQ(zeros.data.sum().item<int64_t>(), 0);
  auto with_nan = torch::randn({64, 32}, kCuda.dtype(torch::kBFloat16));
  with_nan[7][5] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(scale_inv_of(to_fp8(with_nan, Fp8Format::e5m2)))) << "a NaN gradient stays visible";
}

struct Operands {
  Fp8Matrix a, b;
  torch::Tensor product64;  // dequantised a · dequantised bᵀ
};

Operands operands(int64_t m, int64_t n, int64_t k, Fp8Format a_format) {
  const auto x = torch::randn({m, k}, kCuda.dtype(torch::kBFloat16));
  const auto w = torch::randn({n, k}, kCuda.dtype(torch::kBFloat16)) * 0.05;
  Operands o{to_fp8(x, a_format), to_fp8(w, Fp8Format::e4m3), {}};
  o.product64 = torch::mm(dequantised(o.a), dequantised(o.b).t());
  return o;
}

torch::Tensor gelu64(const torch::Tensor& h) { return at::gelu(h.to(torch::kFloat64), "tanh"); }

TEST(GpuFp8, ProductsEqualTheirDequantisedOperandsWithEachEpilogue) {
  torch::manual_seed(2);
  // Rows not a multiple of 16; widths of 80 and 48 (a head width of 80, three of 16).
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{200, 48, 80}, {1000, 1280, 208}}) {
    SCOPED_TRACE(::testing::Message() << m << "×" << k << " · " << k << "×" << n);
    const Operands o = operands(m, n, k, Fp8Format::e4m3);
    const auto bf16 = kCuda.dtype(torch::kBFloat16);
    // float32 accumulation rounded once to bf16: relative 2^-9 an element.
    auto y = torch::empty({m, n}, bf16);
    ASSERT_EQ(fp8_product(o.a, o.b, y, {}), "");
    EXPECT_LT(relative_l2_error(y, o.product64), 3e-3);

    const auto bias = torch::randn({n}, bf16);
    Fp8ProductOptions with_bias;
    with_bias.epilogue = Fp8Epilogue::bias;
    with_bias.bias = bias;
    with_bias.fast_accumulation = true;
    ASSERT_EQ(fp8_product(o.a, o.b, y, with_bias), "");
    const auto h64 = o.product64 + bias.to(torch::kFloat64);
    EXPECT_LT(relative_l2_error(y, h64), 3e-3);

    auto aux = torch::empty({m, n}, bf16);
    Fp8ProductOptions gelu = with_bias;
    gelu.epilogue = Fp8Epilogue::gelu_aux_bias;
    gelu.aux = aux;
    ASSERT_EQ(fp8_product(o.a, o.b, y, gelu), "");
    EXPECT_LT(relative_l2_error(aux, h64), 3e-3);
    EXPECT_LT(relative_l2_error(y, gelu64(h64)), 3e-3);

    const auto before = torch::randn({m, n}, bf16);
    y.copy_(before);
    Fp8ProductOptions accumulate;
    accumulate.accumulate = true;
    ASSERT_EQ(fp8_product(o.a, o.b, y, accumulate), "");
    EXPECT_LT(relative_l2_error(y, before.to(torch::kFloat64) + o.product64), 3e-3);

    // The input-gradient form: an e5m2 gradient times an e4m3 weight, through GELU's derivative.
    const Operands g = operands(m, n, k, Fp8Format::e5m2);
    const auto h = torch::randn({m, n}, bf16) * 2;
    Fp8ProductOptions dgelu;
    dgelu.epilogue = Fp8Epilogue::dgelu;
    dgelu.aux = h;
    ASSERT_EQ(fp8_product(g.a, g.b, y, dgelu), "");
    EXPECT_LT(relative_l2_error(y, at::gelu_backward(g.product64, h.to(torch::kFloat64), "tanh")), 3e-3);
  }
}

struct LinearRun {
  torch::Tensor y, dx, dweight;
};

// y = linear(x, W, b) and its gradients for the loss Σ y·r, W's gradient into a float32 slot as the engine's.
LinearRun run_linear(int64_t in, int64_t out, bool fp8) {
  const auto on = fp8_switch(fp8);
  torch::manual_seed(3);
  auto weight = (torch::randn({out, in}, kCuda) * 0.1).to(torch::kBFloat16).requires_grad_(true);
  auto bias = (torch::randn({out}, kCuda) * 0.1).to(torch::kBFloat16).requires_grad_(true);
  weight.mutable_grad() = torch::zeros({out, in}, kCuda);
  bias.mutable_grad() = torch::zeros({out}, kCuda);
  const auto x = torch::randn({3, 150, in}, kCuda).to(torch::kBFloat16).requires_grad_(true);
  const auto r = torch::randn({3, 150, out}, kCuda);
  const auto y = linear(x, weight, bias);
  (y.to(torch::kFloat32) * r).sum().backward();
  return {y.detach(), x.grad(), weight.grad().clone()};
}

// The float64 truth of the same run.
LinearRun truth_of_linear(int64_t in, int64_t out) {
  torch::manual_seed(3);
  const auto f64 = kCuda.dtype(torch::kFloat64);
  auto weight = (torch::randn({out, in}, kCuda) * 0.1).to(torch::kBFloat16).to(f64).requires_grad_(true);
  auto bias = (torch::randn({out}, kCuda) * 0.1).to(torch::kBFloat16).to(f64).requires_grad_(true);
  const auto x = torch::randn({3, 150, in}, kCuda).to(torch::kBFloat16).to(f64).requires_grad_(true);
  const auto r = torch::randn({3, 150, out}, kCuda).to(f64);
  const auto y = torch::nn::functional::linear(x, weight, bias);
  (y * r).sum().backward();
  return {y.detach(), x.grad(), weight.grad()};
}

TEST(GpuFp8, ALinearTrainsWithFp8ProductsAndSaysWhereAWidthKeepsBf16) {
  const auto truth = truth_of_linear(96, 160);
  reset_fused_path_uses();
  const auto fp8 = run_linear(96, 160, true);
  const auto uses = fused_path_uses();
  ASSERT_EQ(uses.size(), 1u);
  EXPECT_EQ(uses[0].path, "fp8_matmul");
  EXPECT_EQ(uses[0].taken, 2) << "the forward and the input-gradient products";
  EXPECT_EQ(uses[0].fell_back, 0) << uses[0].why_not;
  const auto bf16 = run_linear(96, 160, false);
  // fp8's error is fp8's (a few percent), well above bf16's, so the products really ran in fp8...
  for (const auto& [name, got, want, ref] :
       std::vector<std::tuple<std::string, torch::Tensor, torch::Tensor, torch::Tensor>>{
           {"y", fp8.y, truth.y, bf16.y}, {"dx", fp8.dx, truth.dx, bf16.dx}}) {
    const double fp8_error = relative_l2_error(got, want), bf16_error = relative_l2_error(ref, want);
    EXPECT_LT(fp8_error, 6e-2) << name;
    EXPECT_GT(fp8_error, 4 * bf16_error) << name;
  }
  // ...and the weight gradient stays a bf16 product into the float32 slot: bf16's error.
  EXPECT_LT(relative_l2_error(fp8.dweight, truth.dweight), 2 * relative_l2_error(bf16.dweight, truth.dweight) + 1e-6);

  // A width that is not a multiple of 16 keeps its products in bf16 and says why in one line.
  reset_fused_path_uses();
  const auto narrow = run_linear(40, 160, true);
  const auto narrow_truth = truth_of_linear(40, 160);
  EXPECT_LT(relative_l2_error(narrow.y, narrow_truth.y), 1e-2) << "bf16's error";
  const auto lines = fused_path_fallback_lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("fp8_matmul"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("not a multiple of 16"), std::string::npos) << lines[0];
  reset_fused_path_uses();
}

// [engine] matmul = "fp8" in a run file reaches the products: `zest bench`'s run on the tiny HY-Motion takes
// fp8 products and its JSON says so; the process-wide setting is put back afterwards.
TEST(GpuFp8, TheRunFilesMatmulKeyReachesTheProducts) {
  const auto restore = fp8_switch(false);
  const RunConfig config = parse_run_config(std::string(ZEST_SOURCE_DIR) + "/bench/configs/hymotion_tiny.toml",
                                            {"engine.precision=\"bf16\"", "engine.matmul=\"fp8\""});
  reset_fused_path_uses();
  BenchOptions options;
  options.steps = 2;
  options.warmup = 1;
  const nlohmann::json j = run_bench(config, options);
  EXPECT_EQ(j["matmul"], "fp8");
  ASSERT_TRUE(j["fused_paths"].contains("fp8_matmul")) << j["fused_paths"].dump();
  EXPECT_GT(j["fused_paths"]["fp8_matmul"]["taken"].get<int64_t>(), 0) << j["fused_paths"].dump();
  reset_fused_path_uses();
}

}  // namespace
}  // namespace zest::testing

namespace zest::hymotion::test {
namespace {

using ::zest::testing::fp8_switch;
using ::zest::testing::relative_l2_error;

// HY-Motion 384 wide, 3 heads of 128 (not the release), one double and two single blocks: every fused path
// taken with fp8 products, which carry linear1's split parts and GELU epilogue, linear2's two products and
// the double blocks' MLPs; the output and gradients track float32 as fp8 can (bounds below).
TEST(GpuFp8, HyMotionAtAConfigOtherThanTheReleaseTrainsWithFp8Products) {
  HyMotionConfig c = load_config("hymotion_tiny");
  c.feat_dim = 384;
  c.num_heads = 3;
  c.num_layers = 3;
  c.validate();
  torch::manual_seed(5);
  auto model = std::make_shared<HyMotionModel>(c);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.1);
  }
  torch::manual_seed(6);
  HyMotionInputs in{torch::randn({2, 32, c.input_dim}), torch::randn({2, 6, c.ctxt_input_dim}),
                    torch::randn({2, 1, c.vtxt_input_dim}), torch::rand({2}), torch::ones({2, 32}, torch::kBool),
                    torch::ones({2, 6}, torch::kBool)};
  const auto want = model->forward(in);
  want.pow(2).mean().backward();
  std::map<std::string, torch::Tensor> want_grads;
  for (const auto& item : model->named_parameters()) want_grads[item.key()] = item.value().grad().clone();

  auto run = [&](bool fp8) {
    auto gpu = std::make_shared<HyMotionModel>(c);
    {
      torch::NoGradGuard no_grad;
      const auto from = model->named_parameters();
      for (auto& item : gpu->named_parameters()) item.value().copy_(from[item.key()]);
    }
    gpu->to(torch::kCUDA, torch::kBFloat16);
    for (auto& p : gpu->parameters()) p.mutable_grad() = torch::zeros(p.sizes(), p.options().dtype(torch::kFloat32));
    const auto on = fp8_switch(fp8);
    HyMotionInputs g = in;
    for (torch::Tensor* t : {&g.x, &g.ctxt_input, &g.vtxt_input, &g.timesteps, &g.x_mask_temporal,
                             &g.ctxt_mask_temporal}) {
      *t = t->to(torch::kCUDA);
    }
    const auto out = gpu->forward(g);
    out.to(torch::kFloat32).pow(2).mean().backward();
    return std::pair(out.cpu(), gpu);
  };
  reset_fused_path_uses();
  const auto [out8, model8] = run(true);
  int64_t fp8_taken = 0;
  for (const auto& use : fused_path_uses()) {
    if (use.path == "fp8_matmul") {
      fp8_taken = use.taken;
      // Only a product over a width of the data may keep bf16 (the tiny config's 12-wide motion input).
      if (use.fell_back > 0) EXPECT_NE(use.why_not.find("not a multiple of 16"), std::string::npos) << use.why_not;
    } else {
      EXPECT_EQ(use.fell_back, 0) << use.path << ": " << use.why_not;
    }
  }
  EXPECT_GE(fp8_taken, 20) << "the blocks' products ran in fp8";
  for (const auto& line : fused_path_fallback_lines()) std::cout << line << "\n";
  const auto [out16, model16] = run(false);
  // fp8's rounding through three blocks of random weights: the output 9.8% off float32 (bf16's: 1.0%) and the
  // worst parameter's gradient 65% when measured (bench/RESULTS.md, twenty-second session, call 3). A product
  // scaled wrongly or a weight transposed would be off by 100% or more; one left in bf16 gives bf16's error.
  const double error8 = relative_l2_error(out8, want), error16 = relative_l2_error(out16, want);
  EXPECT_LT(error8, 0.15);
  EXPECT_GT(error8, 2 * error16) << "fp8 really ran";
  const auto grads8 = model8->named_parameters();
  for (const auto& [name, expected] : want_grads) {
    if (expected.abs().max().item<double>() < 1e-6) continue;  // zero in exact arithmetic (the k-norm bias)
    EXPECT_LT(relative_l2_error(grads8[name].grad(), expected), 0.8) << name;
  }
  reset_fused_path_uses();
}

}  // namespace
}  // namespace zest::hymotion::test
