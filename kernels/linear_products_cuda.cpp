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

// How a product meets a Linear's weight W [out, in]: x·Wᵀ (forward: `width` out, `inner` in) or dY·W (input
// gradient: `width` in, `inner` out, W cast transposed so that the product reads it as cuBLASLt's fp8 asks).
struct Orientation {
  int64_t width, inner;
  bool transposed;
};
Orientation forward_of(const torch::Tensor& weight) { return {weight.size(0), weight.size(1), false}; }
Orientation input_grad_of(const torch::Tensor& weight) { return {weight.size(1), weight.size(0), true}; }

// Whether fp8 takes this product (the setting is on and the shapes allow it); a refusal is recorded.
bool fp8_takes(const torch::Tensor& input, Orientation o) {
  if (!fp8_training_products() || !input.is_cuda() || input.size(0) == 0) return false;
  const std::string why = fp8_refusal(input, o.width, o.inner);
  if (!why.empty()) note_fused_path(kFp8Path, false, why);
  return why.empty();
}

// y = epilogue(input · W oriented) in fp8; records whether cuBLASLt ran it or why not, and returns whether it
// ran (y untouched when not).
bool ran_in_fp8(const ProductInput& input, const torch::Tensor& weight, Orientation o, torch::Tensor& y,
                const Fp8ProductOptions& options, std::string_view epilogue = {}) {
  const std::string failure = fp8_product(input.fp8(), to_fp8(weight, Fp8Format::e4m3, o.transposed), y, options);
  note_fused_path(kFp8Path, failure.empty(),
                  failure.empty()
                      ? std::string()
                      : "cuBLASLt did not run the fp8 product " + shape_text(input.matrix().size(0), o.width, o.inner) +
                            (epilogue.empty() ? "" : " with the " + std::string(epilogue) + " epilogue") + ": " +
                            failure);
  return failure.empty();
}

}  // namespace

const Fp8Matrix& ProductInput::fp8() const {
  if (!fp8_) fp8_ = to_fp8(matrix_, format_);
  return *fp8_;
}

torch::Tensor forward_product(const ProductInput& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const torch::Tensor& x2 = x.matrix();
  const Orientation o = forward_of(weight);
  if (fp8_takes(x2, o)) {
    auto y = torch::empty({x2.size(0), o.width}, x2.options());
    Fp8ProductOptions options;
    options.fast_accumulation = true;
    if (bias.defined()) options.epilogue = Fp8Epilogue::bias, options.bias = bias.contiguous();
    if (ran_in_fp8(x, weight, o, y, options)) return y;
  }
  return bias.defined() ? torch::addmm(bias, x2, weight.t()) : torch::mm(x2, weight.t());
}

void add_forward_product(torch::Tensor& y, const ProductInput& x, const torch::Tensor& weight) {
  const torch::Tensor& x2 = x.matrix();
  const Orientation o = forward_of(weight);
  if (fp8_takes(x2, o)) {
    Fp8ProductOptions options;
    options.accumulate = true;
    options.fast_accumulation = true;
    if (ran_in_fp8(x, weight, o, y, options)) return;
  }
  // Named for the profiler and the FLOP counter (profiling/flop_counter.cpp), which counts this name once
  // and not ATen's in-place addmm_ (seen twice on CUDA).
  RECORD_FUNCTION("zest::mm_accumulate", std::vector<c10::IValue>({x2, weight.t()}));
  y.addmm_(x2, weight.t());
}

torch::Tensor input_grad_product(const ProductInput& dy, const torch::Tensor& weight) {
  const torch::Tensor& dy2 = dy.matrix();
  const Orientation o = input_grad_of(weight);
  if (fp8_takes(dy2, o)) {
    auto dx = torch::empty({dy2.size(0), o.width}, dy2.options());
    if (ran_in_fp8(dy, weight, o, dx, {})) return dx;
  }
  return torch::mm(dy2, weight);
}

void add_input_grad_product(torch::Tensor& dx, const ProductInput& dy, const torch::Tensor& weight) {
  const torch::Tensor& dy2 = dy.matrix();
  const Orientation o = input_grad_of(weight);
  if (fp8_takes(dy2, o)) {
    Fp8ProductOptions options;
    options.accumulate = true;
    if (ran_in_fp8(dy, weight, o, dx, options)) return;
  }
  dx.addmm_(dy2, weight);
}

std::optional<GeluProduct> gelu_forward_product(const ProductInput& x, const torch::Tensor& weight,
                                                const torch::Tensor& bias) {
  if (!gelu_epilogue_enabled()) return std::nullopt;
  const torch::Tensor& x2 = x.matrix();
  const Orientation o = forward_of(weight);
  if (bias.defined() && fp8_takes(x2, o)) {
    GeluProduct product{torch::empty({x2.size(0), o.width}, x2.options()),
                        torch::empty({x2.size(0), o.width}, x2.options())};
    Fp8ProductOptions options;
    options.epilogue = Fp8Epilogue::gelu_aux_bias;
    options.bias = bias.contiguous();
    options.aux = product.pre_activation;
    options.fast_accumulation = true;
    if (ran_in_fp8(x, weight, o, product.activated, options, "GELU_AUX_BIAS")) return product;
  }
  return linear_gelu(x2, weight, bias);
}

std::optional<torch::Tensor> gelu_input_grad_product(const ProductInput& dy, const torch::Tensor& weight,
                                                     const torch::Tensor& h) {
  if (!gelu_epilogue_enabled()) return std::nullopt;
  const torch::Tensor& dy2 = dy.matrix();
  const Orientation o = input_grad_of(weight);
  if (h.stride(1) == 1 && fp8_takes(dy2, o)) {
    auto dh = torch::empty({dy2.size(0), o.width}, dy2.options());
    Fp8ProductOptions options;
    options.epilogue = Fp8Epilogue::dgelu;
    options.aux = h;
    if (ran_in_fp8(dy, weight, o, dh, options, "DGELU")) return dh;
  }
  return gelu_backward_of_product(dy2, weight, h);
}

}  // namespace zest
