// SideStream without CUDA (see side_stream.h): the work runs at once, in order.
#include "optim/side_stream.h"

#ifndef ZEST_WITH_CUDA
namespace zest {

struct SideStream::Impl {};

SideStream::SideStream(const torch::Device&) {}
SideStream::~SideStream() = default;
void SideStream::run(const std::function<void()>& work) { work(); }
void SideStream::join() {}
SideStream::Mark SideStream::mark() { return {}; }
bool SideStream::Mark::is_reached() const { return true; }
void SideStream::Mark::wait_host() const {}

}  // namespace zest
#endif
