// HY-Motion samples people can look at: the 22 SMPL body joints of the 201-feature representation drawn
// as a skeleton over a ground grid, one GIF frame per shown motion frame, from a fixed orthographic camera.
#pragma once

#include "data/gif_write.h"

#include <torch/torch.h>

#include <string>

namespace zest {

// The width of the released motion representation (docs/models.md).
inline constexpr int kMotionFeatures = 201;

// Whether motion features [frames, F] hold the joint positions below (F is the released width).
inline bool holds_joint_positions(const torch::Tensor& motion) {
  return motion.dim() == 2 && motion.size(1) == kMotionFeatures && motion.size(0) > 0;
}

// Joint positions [frames, 22, 3] from motion features [frames, 201]: features 135..200, 22 × (x, y, z)
// with y up (docs/models.md: the 66 values after the rotations; the model spec marks this layout as the
// third-party ports' reading). Any other width is an error saying what was expected.
torch::Tensor joint_positions(const torch::Tensor& motion);

struct SkeletonView {
  int size = 256;            // square picture, pixels
  double fps = 30.0;         // of the motion
  double yaw_degrees = 30;   // the camera turned about the vertical axis ...
  double pitch_degrees = 20; // ... and looking down onto the ground plane
};

// The animation: every frame drawn at about 15 frames per second (every second frame of 30 fps motion),
// the picture fitted to the whole motion so the camera never moves; ground at the lowest joint.
GifAnimation render_skeleton(const torch::Tensor& joints, const SkeletonView& view = {});

// render_skeleton(joint_positions(motion)) written to `path` (atomically).
void write_motion_gif(const std::string& path, const torch::Tensor& motion, const SkeletonView& view = {});

}  // namespace zest
