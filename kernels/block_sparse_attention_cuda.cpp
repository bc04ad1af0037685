// The autograd function over the block-sparse attention kernels (see block_sparse_attention.h): saves q, k, v
// and the bias (their producers keep them anyway), the output, the rows' log-sum-exp and the tile map the
// forward built, so the backward classifies no tile again.
#include "kernels/block_sparse_attention.h"
#include "kernels/block_sparse_attention_op.h"
#include "kernels/kernel_tensors.h"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <cstdint>

namespace zest {
namespace {

AttentionStrides strides_of(const torch::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

// 1 when every sample reads one [Sq, Sk] bias (a batch of 1, or one expanded with a batch stride of 0), else B.
int64_t bias_batches_of(const torch::Tensor& bias) {
  return bias.size(0) == 1 || bias.stride(0) == 0 ? 1 : bias.size(0);
}

BlockSparseAttentionShape shape_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& bias) {
  BlockSparseAttentionShape shape;
  shape.batch = q.size(0);
  shape.heads = q.size(2);
  shape.q_len = q.size(1);
  shape.k_len = k.size(1);
  shape.head_dim = q.size(3);
  shape.q = strides_of(q);
  shape.k = strides_of(k);
  shape.v = strides_of(v);
  shape.bias_batch_stride = bias_batches_of(bias) == 1 ? 0 : bias.stride(0);
  return shape;
}

struct BlockSparseAttention : torch::autograd::Function<BlockSparseAttention> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& bias) {
    const BlockSparseAttentionShape shape = shape_of(q, k, v, bias);
    const KernelDtype dtype = kernel_dtype_of(q.scalar_type());
    void* const stream = current_stream_of(q);
    const int64_t bias_batches = bias_batches_of(bias);
    auto map = torch::empty({bias_batches, shape.q_tiles(), shape.k_tiles()}, q.options().dtype(torch::kUInt8));
    launch_attention_tile_map(shape, bias_batches, dtype, bias.data_ptr(), map.data_ptr<uint8_t>(), stream);
    auto out = torch::empty({shape.batch, shape.q_len, shape.heads, shape.head_dim},
                            q.options().memory_format(at::MemoryFormat::Contiguous));
    auto log_sum_exp = torch::empty({shape.batch, shape.heads, shape.q_len}, q.options().dtype(torch::kFloat32));
    launch_block_sparse_attention_forward(shape, dtype, q.data_ptr(), k.data_ptr(), v.data_ptr(), bias.data_ptr(),
                                          map.data_ptr<uint8_t>(), bias_batches, out.data_ptr(),
                                          log_sum_exp.data_ptr<float>(), stream);
    ctx->save_for_backward({q, k, v, bias, out, log_sum_exp, map});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& q = saved[0];
    const auto& k = saved[1];
    const auto& v = saved[2];
    const auto& bias = saved[3];
    const auto& out = saved[4];
    const auto& log_sum_exp = saved[5];
    const auto& map = saved[6];
    BlockSparseAttentionShape shape = shape_of(q, k, v, bias);
    auto grad_out = grads[0].to(q.scalar_type());
    // A slice of a wider gradient ([attention | MLP half]) is read as it is; a broadcast one (a sum's) is copied.
    if (!has_block_sparse_attention_layout(grad_out)) grad_out = grad_out.contiguous();
    shape.grad_out = strides_of(grad_out);

    const auto f32 = q.options().dtype(torch::kFloat32);
    auto row_dot = torch::empty({shape.batch, shape.heads, shape.q_len}, f32);
    auto dq_sum = torch::empty({shape.batch, shape.q_len, shape.heads, shape.head_dim}, f32);
    const auto contiguous = q.options().memory_format(at::MemoryFormat::Contiguous);
    auto dq = torch::empty(q.sizes(), contiguous);
    auto dk = torch::empty(k.sizes(), contiguous);
    auto dv = torch::empty(v.sizes(), contiguous);
    const BlockSparseAttentionGrads out_grads{dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), row_dot.data_ptr<float>(),
                                              dq_sum.data_ptr<float>()};
    launch_block_sparse_attention_backward(shape, kernel_dtype_of(q.scalar_type()), q.data_ptr(), k.data_ptr(),
                                           v.data_ptr(), bias.data_ptr(), map.data_ptr<uint8_t>(),
                                           bias_batches_of(bias), out.data_ptr(), grad_out.data_ptr(),
                                           log_sum_exp.data_ptr<float>(), out_grads, current_stream_of(q));
    return {dq, dk, dv, torch::Tensor()};  // the bias takes no gradient
  }
};

}  // namespace

torch::Tensor block_sparse_attention_cuda(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& bias) {
  return BlockSparseAttention::apply(q, k, v, bias);
}

}  // namespace zest
