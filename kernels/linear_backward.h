// The two halves of the accumulating linear that other fused layers reuse (CUDA builds only; defined in
// linear_cuda.cpp): the forward product of a [tokens, in] input, and the backward that accumulates the
// weight and bias gradients into their .grad slots (linear_op.h says when).
#pragma once

#include "kernels/kernel_tensors.h"
#include "kernels/linear_products.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

namespace zest {

struct LinearGrads {
  torch::Tensor dinput;   // [tokens, in], when asked for
  torch::Tensor dweight;  // undefined when accumulated into weight.grad
  torch::Tensor dbias;    // undefined when accumulated into bias.grad, or without a bias
};

// y [input_sizes…, out] = x2 [tokens, in] · Wᵀ + b, in the training products' precision (linear_products.h).
torch::Tensor linear_forward_2d(const ProductInput& x2, const torch::Tensor& weight, const torch::Tensor& bias,
                                c10::IntArrayRef input_sizes);

// From dY [.., out]: dX = dY·W (when wants_input_grad; in the training products' precision), and dW = dYᵀ·X2, db = Σ dY — accumulated into the
// parameters' .grad slots (float32 or the weight's dtype) with cuBLAS when both exist, else returned.
LinearGrads linear_backward(const torch::Tensor& grad_output, const torch::Tensor& x2, const torch::Tensor& weight,
                            const torch::Tensor& bias, bool wants_input_grad);

// dx += dY·W, or dx = dY·W while dx is undefined: the input gradient of several products over one input (the
// parts of split_linear, the layers of shared_input_linear), added in one buffer.
void add_to_input_grad(torch::Tensor& dx, const torch::Tensor& dy, const torch::Tensor& weight);

// What an autograd function whose backward is the accumulating linear's saves in forward: x2 [tokens, in] (a view
// of x where x allows one), the parameters themselves (backward reads their .grad slots) and x's sizes.
void save_for_linear_backward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x2,
                              const torch::Tensor& weight, const torch::Tensor& bias, c10::IntArrayRef input_sizes);
// linear_backward of what save_for_linear_backward kept, dinput viewed as x.
LinearGrads saved_linear_backward(torch::autograd::AutogradContext* ctx, const torch::Tensor& grad_output);

// The .grad slots backward accumulates into (linear_op.h says which .grad is one); usable when the weight
// has one and so has the bias, if any.
struct GradSlots {
  torch::Tensor weight, bias;
  bool usable = false;
};
GradSlots grad_slots_of(const torch::Tensor& weight, const torch::Tensor& bias);

// A weight as the matrix [out, in]: itself, or a pointwise convolution's [out, in, 1, 1] viewed so.
torch::Tensor matrix_of(const torch::Tensor& weight);

// Counts a backward of an accumulating layer for linear_grad_fusion_counts (fused: into .grad slots).
void count_linear_backward(bool fused);

// An IValue holding a tensor or None, as a possibly undefined tensor.
torch::Tensor optional_tensor(const c10::IValue& value);


}  // namespace zest
