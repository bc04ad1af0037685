// DevicePrefetcher's queue (see device_prefetch.h); the copies and events are in device_prefetch_cuda.cpp
// in CUDA builds, and without CUDA batches pass through.
#include "data/device_prefetch.h"

#include "core/check.h"

#include <chrono>

namespace zest {

#ifndef ZEST_WITH_CUDA
DevicePrefetcher::InFlight DevicePrefetcher::start_copy(HostBatch host) { return {std::move(host), nullptr}; }
HostBatch DevicePrefetcher::finish(InFlight& in_flight) { return std::move(in_flight.batch); }
#endif

DevicePrefetcher::DevicePrefetcher(Source source, const torch::Device& device, int depth)
    : source_(std::move(source)), device_(device), depth_(depth) {
  ZEST_CHECK(depth_ >= 1, "DevicePrefetcher: depth ", depth_, " must be >= 1");
#ifndef ZEST_WITH_CUDA
  ZEST_CHECK(!device_.is_cuda(), "DevicePrefetcher: ", device_, " needs a CUDA build");
#endif
}

DevicePrefetcher::~DevicePrefetcher() = default;

HostBatch DevicePrefetcher::next() {
  using clock = std::chrono::steady_clock;
  double waited = 0.0;
  // On the CPU nothing is gained by drawing ahead (the loader's workers already do): one at a time.
  const size_t wanted = device_.is_cuda() ? static_cast<size_t>(depth_) : 1;
  while (ahead_.size() < wanted) {
    const auto start = clock::now();
    HostBatch host = source_();
    waited += std::chrono::duration<double>(clock::now() - start).count();
    ahead_.push_back(start_copy(std::move(host)));
  }
  last_wait_s_ = waited;
  InFlight front = std::move(ahead_.front());
  ahead_.pop_front();
  return finish(front);
}

int64_t DevicePrefetcher::held() const { return static_cast<int64_t>(ahead_.size()); }

void DevicePrefetcher::clear() { ahead_.clear(); }

}  // namespace zest
