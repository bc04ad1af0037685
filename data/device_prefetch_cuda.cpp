// DevicePrefetcher's copies on CUDA (see device_prefetch.h): a pool stream of the device for the
// host-to-device copies of the page-locked batches, an event after each batch's copies that the compute
// stream waits on, and the batch's device memory recorded as used by the compute stream (the caching
// allocator must not hand it back to the copy stream while a step still reads it). CPU devices pass through.
#include "data/device_prefetch.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace zest {

DevicePrefetcher::InFlight DevicePrefetcher::start_copy(HostBatch host) {
  if (!device_.is_cuda()) return {std::move(host), nullptr};
  if (!copy_stream_)
    copy_stream_ = std::make_shared<c10::cuda::CUDAStream>(
        c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device_.index()));
  const c10::cuda::CUDAStream& copies = *std::static_pointer_cast<c10::cuda::CUDAStream>(copy_stream_);
  InFlight in_flight;
  in_flight.batch.items = host.items;
  {
    const c10::cuda::CUDAStreamGuard on_copies(copies);
    // From page-locked memory (the loader's pin_memory) the copies are asynchronous DMA; the host
    // allocator keeps each source block until its copy is done.
    for (const auto& [name, tensor] : host.tensors) in_flight.batch.tensors[name] = tensor.to(device_, /*non_blocking=*/true);
  }
  auto copied = std::make_shared<at::cuda::CUDAEvent>();
  copied->record(copies);
  in_flight.copied = copied;
  return in_flight;
}

HostBatch DevicePrefetcher::finish(InFlight& in_flight) {
  if (in_flight.copied) {
    const c10::cuda::CUDAStream compute = c10::cuda::getCurrentCUDAStream(device_.index());
    std::static_pointer_cast<at::cuda::CUDAEvent>(in_flight.copied)->block(compute);  // on the device: the host goes on
    for (auto& [name, tensor] : in_flight.batch.tensors) tensor.record_stream(compute);
  }
  return std::move(in_flight.batch);
}

}  // namespace zest
