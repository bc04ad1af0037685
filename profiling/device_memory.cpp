// Peak device memory (see device_memory.h); the CUDA allocator's figures come from device_memory_cuda.cpp.
#include "profiling/device_memory.h"

#include "profiling/process_stats.h"

namespace zest {

#ifdef ZEST_WITH_CUDA
void reset_peak_cuda_memory(int device_index);
DeviceMemoryStats cuda_memory_stats(int device_index);
#endif

void reset_peak_device_memory(const torch::Device& device) {
#ifdef ZEST_WITH_CUDA
  if (device.is_cuda()) reset_peak_cuda_memory(device.index());
#endif
}

DeviceMemoryStats device_memory_stats(const torch::Device& device) {
#ifdef ZEST_WITH_CUDA
  if (device.is_cuda()) return cuda_memory_stats(device.index());
#endif
  const int64_t rss = peak_memory_bytes();
  return {rss, rss};
}

}  // namespace zest
