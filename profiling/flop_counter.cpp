// Matrix-FLOP counting from operator shapes (see flop_counter.h).
#include "profiling/flop_counter.h"

#include "engine/activation_checkpoint.h"

#include <ATen/record_function.h>

#include <atomic>
#include <mutex>

namespace zest {

struct FlopCounter::State {
  std::atomic<int64_t> flops{0};
  std::mutex mutex;
  std::map<std::string, int64_t> attention;
};

namespace {

FlopCounter::State* active = nullptr;  // the counter the callback feeds (one at a time)

std::vector<int64_t> sizes_of(const c10::IValue& v) {
  return v.isTensor() ? v.toTensor().sizes().vec() : std::vector<int64_t>{};
}

int64_t product(const std::vector<int64_t>& v, size_t from = 0) {
  int64_t p = 1;
  for (size_t i = from; i < v.size(); ++i) p *= v[i];
  return p;
}

// 2·m·k·n for a[.., m, k] @ b[.., k, n] (batch dims of a included).
int64_t matmul_flops(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  if (a.size() < 2 || b.size() < 2) return 0;
  return 2 * product(a) * b.back();
}

// Convolution with weight [Cout, Cin/groups, kh, kw]: 2 · (output elements) · Cin/groups · kh · kw.
int64_t conv_flops(const std::vector<int64_t>& weight, int64_t output_numel) {
  if (weight.size() < 3) return 0;
  return 2 * output_numel * product(weight, 1);
}

int64_t conv_output_numel(const std::vector<int64_t>& input, const std::vector<int64_t>& weight,
                          const c10::IValue& stride, const c10::IValue& padding, const c10::IValue& dilation) {
  if (input.size() < 3 || weight.size() < 3) return 0;
  const auto s = stride.toIntVector(), p = padding.toIntVector(), d = dilation.toIntVector();
  int64_t numel = input[0] * weight[0];
  for (size_t i = 2; i < input.size(); ++i) {
    const size_t k = i - 2;
    const int64_t si = s.size() > k ? s[k] : s.front(), pi = p.size() > k ? p[k] : p.front();
    const int64_t di = d.size() > k ? d[k] : d.front();
    numel *= (input[i] + 2 * pi - di * (weight[i] - 1) - 1) / si + 1;
  }
  return numel;
}

int64_t attention_flops(const std::vector<int64_t>& q, const std::vector<int64_t>& k) {
  if (q.size() != 4 || k.size() != 4) return 0;
  return 4 * q[0] * q[1] * q[2] * k[2] * q[3];  // QKᵀ and PV, 2·B·H·Sq·Sk·D each
}

int64_t count(const at::RecordFunction& fn) {
  const std::string name = fn.name();
  const auto inputs = fn.inputs();
  auto in = [&](size_t i) { return i < inputs.size() ? sizes_of(inputs[i]) : std::vector<int64_t>{}; };
  // zest::mm_accumulate: a product accumulated into an existing output — the accumulating linear's weight
  // gradient (kernels/weight_grad_gemm_cuda.cpp), the joined linear's second product
  // (kernels/joined_linear_cuda.cpp). Not aten::addmm_: on CUDA it counted twice (bench/RESULTS.md).
  // zest::mm_epilogue: a cuBLASLt product with a GELU or a residual epilogue (kernels/gelu_epilogue_gemm_cuda.cpp,
  // kernels/residual_epilogue_gemm_cuda.cpp).
  // zest::mm_fp8: an fp8 product, whatever its epilogue (kernels/fp8_product_cuda.cpp).
  if (name == "aten::mm" || name == "aten::bmm" || name == "zest::mm_accumulate" || name == "zest::mm_epilogue" ||
      name == "zest::mm_fp8") {
    return matmul_flops(in(0), in(1));
  }
  if (name == "aten::addmm" || name == "aten::baddbmm") return matmul_flops(in(1), in(2));
  if (name == "aten::convolution" && inputs.size() >= 6) {
    return conv_flops(in(1), conv_output_numel(in(0), in(1), inputs[3], inputs[4], inputs[5]));
  }
  if (name == "aten::convolution_backward" && inputs.size() >= 11) {
    const auto mask = inputs[10].toBoolList();
    const int64_t passes = (mask.get(0) ? 1 : 0) + (mask.get(1) ? 1 : 0);
    return passes * conv_flops(in(2), product(in(0)));
  }
  const bool is_sdpa = name.rfind("aten::_scaled_dot_product_", 0) == 0;
  if (is_sdpa && name.find("_backward") != std::string::npos) return 2 * attention_flops(in(1), in(2));
  if (is_sdpa) return attention_flops(in(0), in(1));
  return 0;
}

std::unique_ptr<at::ObserverContext> on_operator(const at::RecordFunction& fn) {
  FlopCounter::State* state = active;
  if (state == nullptr || is_recomputing()) return nullptr;
  state->flops += count(fn);
  const std::string name = fn.name();
  if (name.find("attention") != std::string::npos) {
    std::lock_guard<std::mutex> lock(state->mutex);
    ++state->attention[name];
  }
  return nullptr;
}

}  // namespace

FlopCounter::FlopCounter() : state_(std::make_shared<State>()) {
  active = state_.get();
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&on_operator).needsInputs(true).scopes(
      {at::RecordScope::FUNCTION}));
}

FlopCounter::~FlopCounter() {
  at::removeCallback(handle_);
  active = nullptr;
}

int64_t FlopCounter::flops() const { return state_->flops.load(); }

std::map<std::string, int64_t> FlopCounter::attention_calls() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->attention;
}

}  // namespace zest
