// A Python binding of the block-sparse attention's kernels alone (kernels/block_sparse_attention.h), for
// bench/block_sparse_attention_check.py: the shortest GPU check of the kernels, without building zest.
#include "kernels/block_sparse_attention.h"

#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

namespace {

zest::AttentionStrides strides_of(const torch::Tensor& t) { return {t.stride(0), t.stride(1), t.stride(2)}; }

zest::KernelDtype dtype_of(const torch::Tensor& t) {
  TORCH_CHECK(t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kFloat16, "bf16 or fp16");
  return t.scalar_type() == torch::kBFloat16 ? zest::KernelDtype::bf16 : zest::KernelDtype::fp16;
}

struct Call {
  zest::BlockSparseAttentionShape shape;
  int64_t bias_batches = 1;
};

// q [B, Sq, H, d], k/v [B, Sk, H, d] (last dim contiguous), bias [B or 1, 1, Sq, Sk] (rows contiguous).
Call call_of(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& bias) {
  Call c;
  c.shape.batch = q.size(0);
  c.shape.q_len = q.size(1);
  c.shape.heads = q.size(2);
  c.shape.head_dim = q.size(3);
  c.shape.k_len = k.size(1);
  c.shape.q = strides_of(q);
  c.shape.k = strides_of(k);
  c.shape.v = strides_of(v);
  TORCH_CHECK(bias.stride(3) == 1 && bias.stride(2) == c.shape.k_len, "bias rows must be contiguous");
  const bool shared = bias.size(0) == 1 || bias.stride(0) == 0;
  c.bias_batches = shared ? 1 : c.shape.batch;
  c.shape.bias_batch_stride = shared ? 0 : bias.stride(0);
  return c;
}

void* stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

std::vector<torch::Tensor> forward(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor bias) {
  const Call c = call_of(q, k, v, bias);
  auto map = torch::empty({c.bias_batches, c.shape.q_tiles(), c.shape.k_tiles()}, q.options().dtype(torch::kUInt8));
  zest::launch_attention_tile_map(c.shape, c.bias_batches, dtype_of(q), bias.data_ptr(), map.data_ptr<uint8_t>(), stream());
  auto out = torch::empty({c.shape.batch, c.shape.q_len, c.shape.heads, c.shape.head_dim}, q.options());
  auto lse = torch::empty({c.shape.batch, c.shape.heads, c.shape.q_len}, q.options().dtype(torch::kFloat32));
  zest::launch_block_sparse_attention_forward(c.shape, dtype_of(q), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                              bias.data_ptr(), map.data_ptr<uint8_t>(), c.bias_batches, out.data_ptr(),
                                              lse.data_ptr<float>(), stream());
  return {out, lse, map};
}

// The tile map alone (the forward builds it first), to time it apart.
torch::Tensor tile_map(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor bias) {
  const Call c = call_of(q, k, v, bias);
  auto map = torch::empty({c.bias_batches, c.shape.q_tiles(), c.shape.k_tiles()}, q.options().dtype(torch::kUInt8));
  zest::launch_attention_tile_map(c.shape, c.bias_batches, dtype_of(q), bias.data_ptr(), map.data_ptr<uint8_t>(), stream());
  return map;
}

std::vector<torch::Tensor> backward(torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor bias,
                                    torch::Tensor map, torch::Tensor out, torch::Tensor grad_out, torch::Tensor lse) {
  Call c = call_of(q, k, v, bias);
  c.shape.grad_out = strides_of(grad_out);
  auto row_dot = torch::empty_like(lse);
  auto dq_sum = torch::empty({c.shape.batch, c.shape.q_len, c.shape.heads, c.shape.head_dim}, lse.options());
  auto dq = torch::empty({c.shape.batch, c.shape.q_len, c.shape.heads, c.shape.head_dim}, q.options());
  auto dk = torch::empty({c.shape.batch, c.shape.k_len, c.shape.heads, c.shape.head_dim}, q.options());
  auto dv = torch::empty_like(dk);
  const zest::BlockSparseAttentionGrads grads{dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), row_dot.data_ptr<float>(),
                                              dq_sum.data_ptr<float>()};
  zest::launch_block_sparse_attention_backward(c.shape, dtype_of(q), q.data_ptr(), k.data_ptr(), v.data_ptr(),
                                               bias.data_ptr(), map.data_ptr<uint8_t>(), c.bias_batches,
                                               out.data_ptr(), grad_out.data_ptr(), lse.data_ptr<float>(), grads,
                                               stream());
  return {dq, dk, dv};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward);
  m.def("backward", &backward);
  m.def("tile_map", &tile_map);
}
