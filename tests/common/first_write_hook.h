// FirstWriteHook: a log stream buffer that runs a hook at its first write. The prepare commands write a
// progress line after each finished piece, so a hook that throws stops one there ("a kill") and one that
// raises SIGINT interrupts it between clips or images, as the resume tests need.
#pragma once

#include <functional>
#include <streambuf>
#include <utility>

namespace zest::testing {

class FirstWriteHook : public std::streambuf {
 public:
  explicit FirstWriteHook(std::function<void()> hook) : hook_(std::move(hook)) {}

 protected:
  int overflow(int c) override {
    if (hook_) std::exchange(hook_, nullptr)();
    return c;
  }

 private:
  std::function<void()> hook_;
};

}  // namespace zest::testing
