// The accumulating linear's autograd function (see linear_op.h): forward is ATen's (addmm with the bias
// in cuBLASLt's epilogue, as torch::linear runs it); backward computes dX with ATen and has cuBLAS
// accumulate the weight and bias gradients into their .grad slots (float32, or the weight's 16-bit dtype).
//
// cuBLAS is the copy LibTorch loaded: its entry point is looked up in the process (dlsym) rather than
// linked, so zest never pairs LibTorch with a second cuBLAS from the toolkit.
#include "core/check.h"
#include "models/common/linear_backward.h"
#include "models/common/linear_op.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/record_function.h>
#include <cublas_v2.h>
#include <torch/csrc/autograd/custom_function.h>

#include <dlfcn.h>

#include <atomic>

namespace zest {
namespace {

std::atomic<int64_t> fused_backwards{0};
std::atomic<int64_t> unfused_backwards{0};

// cublasGemmEx's C entry point (cublas_api.h; the header also overloads the name for C++).
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                  const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                  cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

GemmEx gemm_ex() {
  static const GemmEx fn = reinterpret_cast<GemmEx>(dlsym(RTLD_DEFAULT, "cublasGemmEx"));
  ZEST_CHECK(fn != nullptr, "accumulating linear: cublasGemmEx is not loaded in this process");
  return fn;
}

cudaDataType cuda_type_of(torch::ScalarType dtype) {
  return dtype == torch::kBFloat16 ? CUDA_R_16BF : CUDA_R_16F;
}

// C [m, n] (column-major, ldc) += op_a(A) · op_b(B) with 16-bit A and B, float32 accumulation, and C in
// float32 or in A's dtype (a 16-bit gradient slot: engine.reduce_dtype = the compute dtype).
void gemm_accumulate(cublasOperation_t op_a, cublasOperation_t op_b, int64_t m, int64_t n, int64_t k, const void* a,
                     int64_t lda, const void* b, int64_t ldb, const torch::Tensor& c, int64_t ldc,
                     torch::ScalarType dtype) {
  ZEST_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && lda <= INT32_MAX && ldb <= INT32_MAX,
             "accumulating linear: matrix of more than 2^31 rows or columns");
  const float one = 1.0f;
  const cudaDataType ab = cuda_type_of(dtype);
  const cublasStatus_t status =
      gemm_ex()(at::cuda::getCurrentCUDABlasHandle(), op_a, op_b, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), &one, a, ab, static_cast<int>(lda), b, ab, static_cast<int>(ldb), &one,
                c.data_ptr(), c.scalar_type() == torch::kFloat32 ? CUDA_R_32F : ab, static_cast<int>(ldc),
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  ZEST_CHECK(status == CUBLAS_STATUS_SUCCESS, "accumulating linear: cublasGemmEx failed with status ",
             static_cast<int>(status));
}

// The slot autograd would accumulate p's gradient into, or an undefined tensor: a float32 .grad, or a
// 16-bit one in p's dtype that is a view of a larger buffer (the engine's flat gradient buffer with
// engine.reduce_dtype = the compute dtype). A 16-bit .grad autograd made itself stays autograd's, so plain
// PyTorch code gets autograd's gradients.
torch::Tensor grad_slot_of(const torch::Tensor& p) {
  const torch::Tensor& g = p.grad();
  const bool is_slot = g.defined() && (g.scalar_type() == torch::kFloat32 ||
                                       (g.scalar_type() == p.scalar_type() && g.is_view()));
  const bool usable = is_slot && g.device() == p.device() && g.sizes() == p.sizes() && g.is_contiguous() &&
                      !g.requires_grad();
  return usable ? g : torch::Tensor();
}

// A column of ones [tokens] in dtype on device, grown as needed and kept per device (db = dYᵀ·1).
torch::Tensor ones_column(int64_t tokens, const torch::Tensor& like) {
  thread_local std::vector<torch::Tensor> cache;
  const size_t index = static_cast<size_t>(like.device().index()) * 2 + (like.scalar_type() == torch::kBFloat16 ? 1 : 0);
  if (cache.size() <= index) cache.resize(index + 1);
  torch::Tensor& ones = cache[index];
  if (!ones.defined() || ones.numel() < tokens) ones = torch::ones({std::max<int64_t>(tokens, 1 << 16)}, like.options());
  return ones;
}

}  // namespace

torch::Tensor optional_tensor(const c10::IValue& value) {
  return value.isTensor() ? value.toTensor() : torch::Tensor();
}

torch::Tensor absent_tensor(const torch::Tensor& like) { return torch::empty({0}, like.options().requires_grad(false)); }

torch::Tensor present(const torch::Tensor& t) { return t.defined() && t.numel() > 0 ? t : torch::Tensor(); }

torch::Tensor linear_forward_2d(const torch::Tensor& x2, const torch::Tensor& weight, const torch::Tensor& bias,
                                c10::IntArrayRef input_sizes) {
  const auto y2 = bias.defined() ? torch::addmm(bias, x2, weight.t()) : torch::mm(x2, weight.t());
  auto out_sizes = input_sizes.vec();
  out_sizes.back() = weight.size(0);
  return y2.view(out_sizes);
}

LinearGrads linear_backward(const torch::Tensor& grad_output, const torch::Tensor& x2, const torch::Tensor& weight,
                            const torch::Tensor& bias, bool wants_input_grad) {
  const int64_t out = weight.size(0), in = weight.size(1), tokens = x2.size(0);
  const auto dy = grad_output.reshape({-1, out}).to(weight.scalar_type()).contiguous();
  const auto x_c = x2.contiguous();
  LinearGrads g;
  if (wants_input_grad) g.dinput = torch::mm(dy, weight);
  const auto weight_slot = grad_slot_of(weight);
  const auto bias_slot = bias.defined() ? grad_slot_of(bias) : torch::Tensor();
  if (weight_slot.defined() && (!bias.defined() || bias_slot.defined())) {
    // Row-major dW [out, in] is column-major [in, out]: dWᵀ += Xᵀ·dY, X column-major [in, tokens].
    // Named for the profiler and the FLOP counter as dYᵀ [out, tokens] @ X [tokens, in].
    RECORD_FUNCTION("zest::mm_accumulate", std::vector<c10::IValue>({dy.t(), x_c}));
    gemm_accumulate(CUBLAS_OP_N, CUBLAS_OP_T, in, out, tokens, x_c.data_ptr(), in, dy.data_ptr(), out,
                    weight_slot, in, weight.scalar_type());
    if (bias.defined()) {  // db [out] += dY column-major [out, tokens] · 1 [tokens]
      gemm_accumulate(CUBLAS_OP_N, CUBLAS_OP_N, out, 1, tokens, dy.data_ptr(), out, ones_column(tokens, dy).data_ptr(),
                      tokens, bias_slot, out, weight.scalar_type());
    }
    ++fused_backwards;
  } else {
    g.dweight = torch::mm(dy.t(), x_c);
    if (bias.defined()) g.dbias = dy.sum(0);
    ++unfused_backwards;
  }
  return g;
}

namespace {

struct AccumulatingLinear : torch::autograd::Function<AccumulatingLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    const auto x2 = x.reshape({-1, weight.size(1)});  // a view where x allows one (as torch::linear folds)
    ctx->save_for_backward({x2});
    const torch::Tensor b = present(bias);
    ctx->saved_data["weight"] = weight;  // the parameter itself: backward reads its .grad slot
    ctx->saved_data["bias"] = b;
    ctx->saved_data["input_sizes"] = x.sizes().vec();
    return linear_forward_2d(x2, weight, b, x.sizes());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto x2 = ctx->get_saved_variables()[0];
    const auto weight = ctx->saved_data["weight"].toTensor();
    const auto bias = optional_tensor(ctx->saved_data["bias"]);
    LinearGrads g = linear_backward(grads[0], x2, weight, bias, ctx->needs_input_grad(0));
    if (g.dinput.defined()) g.dinput = g.dinput.view(ctx->saved_data["input_sizes"].toIntVector());
    return {g.dinput, g.dweight, g.dbias};
  }
};

}  // namespace

torch::Tensor accumulating_linear_cuda(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return AccumulatingLinear::apply(x, weight, bias.defined() ? bias : absent_tensor(weight));
}

LinearGradFusionCounts accumulating_linear_counts() { return {fused_backwards.load(), unfused_backwards.load()}; }

}  // namespace zest
