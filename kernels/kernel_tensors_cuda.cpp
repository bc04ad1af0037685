// current_stream_of (see kernel_tensors.h).
#include "kernels/kernel_tensors.h"

#include <c10/cuda/CUDAStream.h>

namespace zest {

void* current_stream_of(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}

}  // namespace zest
