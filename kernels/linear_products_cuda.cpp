// The Linear layers' training products in their precision (see linear_products.h): each product asks
// whether fp8 takes it, runs it so where it does, and otherwise runs ATen's 16-bit product (or the 16-bit
// GELU epilogue), recording every fp8 decision under the fused path "fp8_matmul".
#include "kernels/linear_products.h"

#include "kernels/fused_paths.h"
#include "kernels/matmul_precision.h"

#include <ATen/record_function.h>

namespace zest {
namespace {

constexpr std::string_view kFp8Path = "fp8_matmul";

std::string shape_text(int64_t rows, int64_t n, int64_t k) {
  return "[" + std::to_string(rows) + ", " + std::to_string(k) + "]·[" + std::to_string(k) + ", " +
         std::to_string(n) + "]";
}

// Why fp8 cannot take the product of `input` [rows, k] with a [k, n] operand ("" when it can). cuBLASLt's
// fp8 products need both operands' rows 16-byte aligned, so k (their row length) and n (the result's, and
// the transposed weight's) a multiple of 16.
std::string fp8_refusal(const torch::Tensor& input, int64_t n, int64_t k) {
  const auto dtype = input.scalar_type();
  if (dtype != torch::kBFloat16 && dtype != torch::kHalf) {
    return std::string("a product's operands are ") + c10::toString(dtype) + ", not 16-bit";
  }
  if (k % 16 != 0 || n % 16 != 0) {
    return "the product " + shape_text(input.size(0), n, k) + " has a dimension that is not a multiple of 16";
  }
  return "";
}

// Whether fp8 takes this product (the setting is on and the shapes allow it); a refusal is recorded.
bool fp8_takes(const torch::Tensor& input, int64_t n, int64_t k) {
  if (!fp8_training_products() || !input.is_cuda() || input.size(0) == 0) return false;
  const std::string why = fp8_refusal(input, n, k);
  if (!why.empty()) note_fused_path(kFp8Path, false, why);
  return why.empty();
}

// Records whether cuBLASLt ran the fp8 product (`failure` empty) or why not; returns whether it ran.
bool noted(const std::string& failure, const torch::Tensor& input, int64_t n, int64_t k,
           std::string_view epilogue = {}) {
  const bool ran = failure.empty();
  note_fused_path(kFp8Path, ran,
                  ran ? std::string()
                      : "cuBLASLt did not run the fp8 product " + shape_text(input.size(0), n, k) +
                            (epilogue.empty() ? "" : " with the " + std::string(epilogue) + " epilogue") + ": " +
                            failure);
  return ran;
}

Fp8Matrix weight_as_fp8(const torch::Tensor& weight, bool transposed) {
  return to_fp8(weight, Fp8Format::e4m3, transposed);
}

}  // namespace

const Fp8Matrix& ProductInput::fp8() const {
  if (!fp8_) fp8_ = to_fp8(matrix_, format_);
  return *fp8_;
}

torch::Tensor forward_product(const ProductInput& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const torch::Tensor& x2 = x.matrix();
  const int64_t out = weight.size(0), in = weight.size(1);
  if (fp8_takes(x2, out, in)) {
    auto y = torch::empty({x2.size(0), out}, x2.options());
    Fp8ProductOptions options;
    options.fast_accumulation = true;
    if (bias.defined()) options.epilogue = Fp8Epilogue::bias, options.bias = bias.contiguous();
    if (noted(fp8_product(x.fp8(), weight_as_fp8(weight, false), y, options), x2, out, in)) return y;
  }
  return bias.defined() ? torch::addmm(bias, x2, weight.t()) : torch::mm(x2, weight.t());
}

void add_forward_product(torch::Tensor& y, const ProductInput& x, const torch::Tensor& weight) {
  const torch::Tensor& x2 = x.matrix();
  const int64_t out = weight.size(0), in = weight.size(1);
  if (fp8_takes(x2, out, in)) {
    Fp8ProductOptions options;
    options.accumulate = true;
    options.fast_accumulation = true;
    if (noted(fp8_product(x.fp8(), weight_as_fp8(weight, false), y, options), x2, out, in)) return;
  }
  // Named for the profiler and the FLOP counter (profiling/flop_counter.cpp), which counts this name once
  // and not ATen's in-place addmm_ (seen twice on CUDA).
  RECORD_FUNCTION("zest::mm_accumulate", std::vector<c10::IValue>({x2, weight.t()}));
  y.addmm_(x2, weight.t());
}

torch::Tensor input_grad_product(const ProductInput& dy, const torch::Tensor& weight) {
  const torch::Tensor& dy2 = dy.matrix();
  const int64_t out = weight.size(0), in = weight.size(1);
  if (fp8_takes(dy2, in, out)) {
    auto dx = torch::empty({dy2.size(0), in}, dy2.options());
    if (noted(fp8_product(dy.fp8(), weight_as_fp8(weight, true), dx, {}), dy2, in, out)) return dx;
  }
  return torch::mm(dy2, weight);
}

void add_input_grad_product(torch::Tensor& dx, const ProductInput& dy, const torch::Tensor& weight) {
  const torch::Tensor& dy2 = dy.matrix();
  const int64_t out = weight.size(0), in = weight.size(1);
  if (fp8_takes(dy2, in, out)) {
    Fp8ProductOptions options;
    options.accumulate = true;
    if (noted(fp8_product(dy.fp8(), weight_as_fp8(weight, true), dx, options), dy2, in, out)) return;
  }
  dx.addmm_(dy2, weight);
}

std::optional<GeluProduct> gelu_forward_product(const ProductInput& x, const torch::Tensor& weight,
                                                const torch::Tensor& bias) {
  const torch::Tensor& x2 = x.matrix();
  const int64_t out = weight.size(0), in = weight.size(1);
  if (!gelu_epilogue_enabled()) return std::nullopt;
  if (bias.defined() && fp8_takes(x2, out, in)) {
    GeluProduct product{torch::empty({x2.size(0), out}, x2.options()), torch::empty({x2.size(0), out}, x2.options())};
    Fp8ProductOptions options;
    options.epilogue = Fp8Epilogue::gelu_aux_bias;
    options.bias = bias.contiguous();
    options.aux = product.pre_activation;
    options.fast_accumulation = true;
    if (noted(fp8_product(x.fp8(), weight_as_fp8(weight, false), product.activated, options), x2, out, in,
              "GELU_AUX_BIAS")) {
      return product;
    }
  }
  return linear_gelu(x2, weight, bias);
}

std::optional<torch::Tensor> gelu_input_grad_product(const ProductInput& dy, const torch::Tensor& weight,
                                                     const torch::Tensor& h) {
  const torch::Tensor& dy2 = dy.matrix();
  const int64_t out = weight.size(0), width = weight.size(1);
  if (!gelu_epilogue_enabled()) return std::nullopt;
  if (h.stride(1) == 1 && fp8_takes(dy2, width, out)) {
    auto dh = torch::empty({dy2.size(0), width}, dy2.options());
    Fp8ProductOptions options;
    options.epilogue = Fp8Epilogue::dgelu;
    options.aux = h;
    if (noted(fp8_product(dy.fp8(), weight_as_fp8(weight, true), dh, options), dy2, width, out, "DGELU")) return dh;
  }
  return gelu_backward_of_product(dy2, weight, h);
}

}  // namespace zest
