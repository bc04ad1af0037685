// contiguous_grad: the identity in forward whose backward hands on a gradient contiguous in x's own memory
// format (channels-last for channels-last activations). Put after an op whose backward keys cached work by
// its inputs' layout but not by its output gradient's layout (cuDNN's attention, see
// models/hymotion/layers.cpp), so every call sees one gradient layout; or before a join whose backward hands
// on strided slices (the UNet's skip concatenation), so the slice is copied once rather than by each op that
// consumes it.
#pragma once

#include <torch/torch.h>

namespace zest {

torch::Tensor contiguous_grad(const torch::Tensor& x);

}  // namespace zest
