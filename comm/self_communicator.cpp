// World-of-one collectives: identity operations with the same argument checks as the real ones.
#include "comm/self_communicator.h"

#include "core/check.h"

namespace zest {

WorkHandle SelfCommunicator::allreduce(const torch::Tensor& tensor, ReduceOp) {
  ZEST_CHECK(tensor.is_contiguous(), "allreduce needs a contiguous tensor");
  return std::make_unique<DoneWork>();
}

WorkHandle SelfCommunicator::reduce_scatter(const torch::Tensor& input, const torch::Tensor& output,
                                            ReduceOp) {
  ZEST_CHECK(input.numel() == output.numel(), "reduce_scatter: input has ", input.numel(),
             " elements, output ", output.numel(), " (world size 1)");
  if (input.data_ptr() != output.data_ptr()) {
    torch::NoGradGuard no_grad;
    output.copy_(input.view_as(output));
  }
  return std::make_unique<DoneWork>();
}

WorkHandle SelfCommunicator::allgather(const torch::Tensor& input, const torch::Tensor& output) {
  ZEST_CHECK(input.numel() == output.numel(), "allgather: input has ", input.numel(),
             " elements, output ", output.numel(), " (world size 1)");
  if (input.data_ptr() != output.data_ptr()) {
    torch::NoGradGuard no_grad;
    output.copy_(input.view_as(output));
  }
  return std::make_unique<DoneWork>();
}

WorkHandle SelfCommunicator::broadcast(const torch::Tensor&, int root) {
  ZEST_CHECK(root == 0, "broadcast root ", root, " outside a world of size 1");
  return std::make_unique<DoneWork>();
}

}  // namespace zest
