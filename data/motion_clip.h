// One HY-Motion training clip from a stranger's folder: a NumPy .npy file of [frames, features] floats (30 fps;
// HY-Motion's 201 features per frame), read with every check made before anything is allocated: a regular
// file, a well-formed header, a float dtype, two dimensions, the model's width, 1 to max_frames frames, the
// file's size equal to what the header says, and every value finite.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace zest {

struct MotionClipLimits {
  int64_t motion_dim = 201;
  int64_t max_frames = 1800;
};

// [frames, motion_dim] float32. A clip that cannot be used throws zest::Error whose text is the reason only
// (e.g. "has 12 features per frame; the model takes 201"): the caller names the file.
torch::Tensor read_motion_clip(const std::string& path, const MotionClipLimits& limits);

}  // namespace zest
