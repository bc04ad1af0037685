// SideStream on CUDA (see side_stream.h): a pool stream of the device and event edges to and from the
// current stream. CPU devices take the same path as the CPU build (no stream).
#include "optim/side_stream.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

namespace zest {

struct SideStream::Impl {
  c10::cuda::CUDAStream stream;
};

struct SideStream::Mark::Event {
  at::cuda::CUDAEvent event;
};

SideStream::SideStream(const torch::Device& device) {
  if (!device.is_cuda()) return;
  impl_ = std::make_unique<Impl>(Impl{c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index())});
}

SideStream::~SideStream() = default;

void SideStream::run(const std::function<void()>& work) {
  if (!impl_) {
    work();
    return;
  }
  at::cuda::CUDAEvent queued_so_far;
  queued_so_far.record(c10::cuda::getCurrentCUDAStream(impl_->stream.device_index()));
  queued_so_far.block(impl_->stream);
  const c10::cuda::CUDAStreamGuard guard(impl_->stream);
  work();
}

void SideStream::join() {
  if (!impl_) return;
  at::cuda::CUDAEvent done;
  done.record(impl_->stream);
  done.block(c10::cuda::getCurrentCUDAStream(impl_->stream.device_index()));
}

SideStream::Mark SideStream::mark() {
  Mark mark;
  if (!impl_) return mark;
  mark.event_ = std::make_shared<Mark::Event>();
  mark.event_->event.record(impl_->stream);
  return mark;
}

bool SideStream::Mark::is_reached() const { return !event_ || event_->event.query(); }

void SideStream::Mark::wait_host() const {
  if (event_) event_->event.synchronize();
}

}  // namespace zest
