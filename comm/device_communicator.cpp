// Choosing the data communicator for a device (see device_communicator.h).
#include "comm/device_communicator.h"

#include "core/check.h"

#include <map>
#include <mutex>

namespace zest {

#ifdef ZEST_WITH_CUDA
// comm/nccl_communicator_cuda.cpp
std::shared_ptr<Communicator> make_nccl_communicator(const std::shared_ptr<Communicator>& control,
                                                     const torch::Device& device);
#endif

namespace {

std::mutex& cache_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::map<std::pair<const Communicator*, int>, std::shared_ptr<Communicator>>& cache() {
  static std::map<std::pair<const Communicator*, int>, std::shared_ptr<Communicator>> communicators;
  return communicators;
}

}  // namespace

void release_device_communicators() {
  std::lock_guard<std::mutex> lock(cache_mutex());
  cache().clear();
}

std::shared_ptr<Communicator> communicator_for_device(const std::shared_ptr<Communicator>& control,
                                                      const torch::Device& device) {
  ZEST_CHECK(control != nullptr, "communicator_for_device: no world communicator");
  if (!device.is_cuda() || control->size() == 1) return control;  // self handles device tensors itself
#ifdef ZEST_WITH_CUDA
  // One NCCL communicator per (world, device) for the life of the process: creating one is a collective
  // that takes seconds, and every engine in the process reuses it.
  std::lock_guard<std::mutex> lock(cache_mutex());
  auto& slot = cache()[{control.get(), device.index()}];
  if (!slot) slot = make_nccl_communicator(control, device);
  return slot;
#else
  ZEST_FAIL("device ", device, " needs a CUDA build of zest");
#endif
}

}  // namespace zest
