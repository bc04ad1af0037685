// Peak memory of the device a run uses: the CUDA caching allocator's peak allocated and reserved bytes
// on a GPU, the process's peak resident set on the CPU (as both).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace zest {

struct DeviceMemoryStats {
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
};

void reset_peak_device_memory(const torch::Device& device);
DeviceMemoryStats device_memory_stats(const torch::Device& device);

}  // namespace zest
