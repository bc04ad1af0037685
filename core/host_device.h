// ZEST_HOST_DEVICE: a function compiled for the host and, under nvcc, for the device too — for the
// arithmetic the CPU paths call directly and one CUDA thread or every element runs on the GPU.
#pragma once

#if defined(__CUDACC__)
#define ZEST_HOST_DEVICE __host__ __device__
#else
#define ZEST_HOST_DEVICE
#endif
