// Scaling and rounding 16-bit (or float32) matrices to fp8 for the fp8 products (kernels/fp8_product.h), as
// CUDA kernels without LibTorch (nvcc compiles them; kernels/fp8_product_cuda.cpp is the tensor glue).
// Scaling is per tensor and current: the scale comes from the tensor's own absolute maximum, measured on the
// device just before the cast, so nothing waits on the host and no history is kept between steps.
#pragma once

#include "kernels/kernel_dtype.h"

#include <cstdint>

namespace zest {

// e4m3 (largest finite 448) for weights and activations, e5m2 (57344) for gradients: the wider range of
// the two for the values whose range moves most.
enum class Fp8Format { e4m3, e5m2 };
float fp8_largest(Fp8Format format);

// A matrix [rows, cols] whose rows are each contiguous, `row_stride` elements apart (≥ cols).
struct Fp8Source {
  KernelDtype dtype;
  const void* data;
  int64_t rows = 0, cols = 0, row_stride = 0;
};

// *amax = max |x| over the matrix, NaN when any element is NaN. Zeroes *amax first (on the stream).
void launch_fp8_amax(const Fp8Source& x, float* amax, void* cuda_stream);

// out = fp8(x · fp8_largest / *amax), saturated to the largest finite value, as a row-major [rows, cols]
// matrix (transposed: [cols, rows]); *scale_inv = *amax / fp8_largest, the factor the product multiplies
// back (1 for an all-zero matrix).
void launch_fp8_cast(const Fp8Source& x, const float* amax, Fp8Format format, bool transposed, uint8_t* out,
                     float* scale_inv, void* cuda_stream);

// The most rows a transposed cast takes (its grid's second dimension: 32 rows a block).
constexpr int64_t kFp8TransposedMaxRows = int64_t{65535} * 32;

}  // namespace zest
