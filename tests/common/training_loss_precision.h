// The check both families' precision suites make of their training objective on a loader batch: run in
// float32 and in bf16 at the same draws, the loss is a float32 scalar, backward reaches every parameter, and
// the bf16 loss is within 1% of the float32 one.
#pragma once

#include "models/registry.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zest::testing {

// model_as(dtype): the model under test with its parameters in dtype (a pointer to a UnitModule).
template <typename ModelAs>
void expect_bf16_training_loss_near_float32(const TrainingLoss& training_loss, const TensorMap& batch,
                                            ModelAs model_as) {
  const auto loss_in = [&](torch::Dtype dtype) {
    auto model = model_as(dtype);
    torch::Generator generator = at::make_generator<at::CPUGeneratorImpl>(7);
    const torch::Tensor loss = training_loss(*model, batch, generator);
    EXPECT_EQ(loss.scalar_type(), torch::kFloat32);
    loss.backward();
    for (const auto& p : model->named_parameters()) EXPECT_TRUE(p.value().grad().defined()) << p.key();
    return loss.item<double>();
  };
  const double fp32 = loss_in(torch::kFloat32), bf16 = loss_in(torch::kBFloat16);
  EXPECT_NEAR(bf16, fp32, 1e-2 * fp32);
}

}  // namespace zest::testing
