// contiguous_grad: the identity in forward whose backward hands on a contiguous gradient. Put after an
// op whose backward keys cached work by its inputs' layout but not by its output gradient's layout
// (cuDNN's attention, see models/hymotion/layers.cpp), so every call sees one gradient layout.
#pragma once

#include <torch/torch.h>

namespace zest {

torch::Tensor contiguous_grad(const torch::Tensor& x);

}  // namespace zest
