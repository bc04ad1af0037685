// Device choice and the current CUDA device (see device_placement.h).
#include "engine/device_placement.h"

#include "core/check.h"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace zest {

torch::Device place_engine(const EngineConfig& config, const Communicator& comm) {
  if (config.resolved_device() == DeviceKind::cpu) return torch::kCPU;
  ZEST_CHECK(is_cuda_available(), "engine.device = \"cuda\" but this zest build or machine has no CUDA GPU");
  const int count = static_cast<int>(torch::cuda::device_count());
  const int local = comm.local_rank();
  ZEST_CHECK(local < count, "rank ", comm.rank(), " has local rank ", local, " but this node shows only ", count,
             " GPU(s) (CUDA_VISIBLE_DEVICES?): start at most ", count, " ranks per node");
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(local));
  c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).setDevice(device);
  return device;
}

}  // namespace zest
