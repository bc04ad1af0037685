// The autograd function over the q/k norm + RoPE kernels (see qk_norm_rope.h): saves the projections
// (their producers keep them anyway), the norm weights, the tables and the two rstd vectors. With one
// stream v is returned as a view of the projection: the attention saves v, and a copy would be kept
// beside the projection for the whole backward (0.7 GiB on HY-Motion 1B at 32 sequences).
#include "kernels/kernel_tensors.h"
#include "kernels/linear_backward.h"
#include "kernels/qk_norm_rope.h"
#include "kernels/qk_norm_rope_op.h"

#include <torch/csrc/autograd/custom_function.h>

namespace zest {
namespace {

QkvShape shape_of(const std::vector<torch::Tensor>& projections, const std::vector<torch::Tensor>& weights,
                  int64_t num_heads, const torch::Tensor& cos) {
  QkvShape shape;
  const auto& first = projections[0];
  shape.batch = first.size(0);
  shape.heads = num_heads;
  shape.head_dim = first.size(2) / (3 * num_heads);
  shape.rotated = cos.size(0);
  shape.streams = static_cast<int>(projections.size());
  for (int i = 0; i < shape.streams; ++i) {
    const auto& p = projections[static_cast<size_t>(i)];
    shape.stream[i] = {p.data_ptr(), p.size(1), p.stride(0), p.stride(1), weights[2 * static_cast<size_t>(i)].data_ptr(),
                       weights[2 * static_cast<size_t>(i) + 1].data_ptr(), nullptr};
  }
  return shape;
}

// Inputs: p0, p1 (absent with one stream), q0, k0, q1, k1 (the norm weights), cos, sin.
struct QkNormRope : torch::autograd::Function<QkNormRope> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& p0,
                                                const torch::Tensor& p1, const torch::Tensor& q0,
                                                const torch::Tensor& k0, const torch::Tensor& q1,
                                                const torch::Tensor& k1, const torch::Tensor& cos,
                                                const torch::Tensor& sin, int64_t num_heads, double eps) {
    const bool two = present(p1).defined();
    std::vector<torch::Tensor> projections{p0}, weights{q0, k0};
    if (two) projections.push_back(p1), weights.push_back(q1), weights.push_back(k1);
    const QkvShape shape = shape_of(projections, weights, num_heads, cos);
    const auto out_options = p0.options().memory_format(at::MemoryFormat::Contiguous);
    const std::vector<int64_t> sizes{shape.batch, shape.seq(), num_heads, shape.head_dim};
    auto q = torch::empty(sizes, out_options), k = torch::empty(sizes, out_options);
    auto v = two ? torch::empty(sizes, out_options)
                 : p0.view({shape.batch, shape.seq(), 3, num_heads, shape.head_dim}).select(2, 2);
    auto rstd_q = torch::empty({shape.rows()}, p0.options().dtype(torch::kFloat32));
    auto rstd_k = torch::empty({shape.rows()}, p0.options().dtype(torch::kFloat32));
    launch_qk_norm_rope_forward(shape, kernel_dtype_of(p0.scalar_type()), cos.data_ptr<float>(), sin.data_ptr<float>(),
                                eps, q.data_ptr(), k.data_ptr(), two ? v.data_ptr() : nullptr, rstd_q.data_ptr<float>(),
                                rstd_k.data_ptr<float>(), current_stream_of(p0));
    ctx->save_for_backward({p0, p1, q0, k0, q1, k1, cos, sin, rstd_q, rstd_k});
    ctx->saved_data["num_heads"] = num_heads;
    return {q, k, v};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& p0 = saved[0];
    const bool two = present(saved[1]).defined();
    std::vector<torch::Tensor> projections{p0}, weights{saved[2], saved[3]};
    if (two) projections.push_back(saved[1]), weights.push_back(saved[4]), weights.push_back(saved[5]);
    const auto& cos = saved[6];
    const auto& sin = saved[7];
    QkvShape shape = shape_of(projections, weights, ctx->saved_data["num_heads"].toInt(), cos);
    const auto dtype = p0.scalar_type();
    const std::vector<int64_t> sizes{shape.batch, shape.seq(), shape.heads, shape.head_dim};
    const auto grad_or_zeros = [&](const torch::Tensor& g) {
      return g.defined() ? g.to(dtype).contiguous() : torch::zeros(sizes, p0.options());
    };
    const auto dq = grad_or_zeros(grads[0]), dk = grad_or_zeros(grads[1]), dv = grad_or_zeros(grads[2]);
    std::vector<torch::Tensor> dprojections;
    for (int i = 0; i < shape.streams; ++i) {
      const auto& p = projections[static_cast<size_t>(i)];
      dprojections.push_back(torch::empty(p.sizes(), p.options().memory_format(at::MemoryFormat::Contiguous)));
      shape.stream[i].dproj = dprojections.back().data_ptr();
    }
    const auto f32 = p0.options().dtype(torch::kFloat32);
    auto dweights = torch::empty({2 * 2 * shape.head_dim}, f32);
    auto scratch = torch::empty({qk_norm_rope_scratch(shape, static_cast<int>(p0.element_size()))}, f32);
    launch_qk_norm_rope_backward(shape, kernel_dtype_of(dtype), cos.data_ptr<float>(), sin.data_ptr<float>(),
                                 dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), saved[8].data_ptr<float>(),
                                 saved[9].data_ptr<float>(), dweights.data_ptr<float>(), scratch.data_ptr<float>(),
                                 current_stream_of(p0));
    const auto weight_grad = [&](int index) {  // as the norm's autograd function returns it: in the weight's dtype
      return dweights.narrow(0, index * shape.head_dim, shape.head_dim).to(dtype);
    };
    torch::autograd::variable_list out(10);  // one per forward argument
    out[0] = dprojections[0];
    out[2] = weight_grad(0);
    out[3] = weight_grad(1);
    if (two) {
      out[1] = dprojections[1];
      out[4] = weight_grad(2);
      out[5] = weight_grad(3);
    }
    return out;
  }
};

}  // namespace

AttentionInputs qk_norm_rope_cuda(const std::vector<QkvProjection>& streams, int64_t num_heads,
                                  const torch::Tensor& cos, const torch::Tensor& sin, double eps) {
  const auto& first = streams[0];
  const bool two = streams.size() > 1;
  const auto absent = absent_tensor(first.proj);
  const auto outputs = QkNormRope::apply(first.proj, two ? streams[1].proj : absent, first.q_weight, first.k_weight,
                                         two ? streams[1].q_weight : absent, two ? streams[1].k_weight : absent, cos,
                                         sin, num_heads, eps);
  return {outputs[0], outputs[1], outputs[2]};
}

}  // namespace zest
