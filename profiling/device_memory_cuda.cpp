// The CUDA caching allocator's peak statistics (see device_memory.h).
#include "profiling/device_memory.h"

#include <c10/cuda/CUDACachingAllocator.h>

namespace zest {

void reset_peak_cuda_memory(int device_index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device_index));
}

DeviceMemoryStats cuda_memory_stats(int device_index) {
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(device_index));
  constexpr auto kAll = 0;  // StatType::AGGREGATE
  return {stats.allocated_bytes[kAll].peak, stats.reserved_bytes[kAll].peak};
}

}  // namespace zest
