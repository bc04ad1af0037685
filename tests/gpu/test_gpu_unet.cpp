// The UNet on CUDA (ctest label `gpu`): channels-last activations (the CUDA default) with float32
// weights give the reference's output and gradients, as the CPU does.
#include "common/tensor_close.h"
#include "unet/unet_test_util.h"

#include <gtest/gtest.h>

namespace zest::unet::test {
namespace {

using ::zest::testing::closeness;
using ::zest::testing::kGradParity;

torch::Tensor on_gpu(const torch::Tensor& t) { return t.defined() ? t.to(torch::kCUDA) : t; }

TEST(GpuUNet, ChannelsLastMatchesTheReference) {
  at::globalContext().setAllowTF32CuDNN(false);  // float32 convolutions, as the reference ran them
  const auto golden = Golden::load();
  UNet2DConditionModel model(load_config("unet_tiny"));
  load_params(model, golden.params());
  model.to(torch::kCUDA);
  const UNetConditioning cond{on_gpu(golden.input("encoder_hidden_states")), on_gpu(golden.input("text_embeds")),
                              on_gpu(golden.input("time_ids"))};
  const auto out = model.forward(on_gpu(golden.input("sample")), on_gpu(golden.input("timestep")), cond);
  EXPECT_TRUE(out.is_contiguous(at::MemoryFormat::ChannelsLast) && !out.is_contiguous());
  EXPECT_LE(max_abs_diff(out.cpu(), golden.output("sample")), 1e-4);
  out.pow(2).mean().backward();
  for (const auto& item : model.named_parameters()) {
    ASSERT_TRUE(item.value().grad().defined()) << item.key();
    const auto c = closeness(item.value().grad().cpu(), golden.grads().at(item.key()), kGradParity);
    EXPECT_TRUE(c.ok) << item.key() << ": " << c.describe();
  }
  at::globalContext().setAllowTF32CuDNN(true);
}

}  // namespace
}  // namespace zest::unet::test
