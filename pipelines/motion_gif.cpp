// Skeleton rendering of HY-Motion joints into GIF frames (see motion_gif.h).
#include "pipelines/motion_gif.h"

#include "core/check.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

namespace zest {
namespace {

constexpr int kJoints = 22;
constexpr int kPositionsAt = 135;
// SMPL's kinematic tree (body joints): parent of each joint, -1 for the pelvis.
constexpr std::array<int, kJoints> kParent{-1, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 9, 12, 13, 14, 16, 17, 18, 19};
// 0 centre line (pelvis, spine, neck, head), 1 left, 2 right, per joint.
constexpr std::array<int, kJoints> kSide{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 1, 2, 1, 2};

enum Colour : uint8_t { kBackground, kGrid, kCentre, kLeft, kRight, kJoint };
const std::vector<std::array<uint8_t, 3>> kPalette{
    {28, 30, 36}, {78, 82, 94}, {235, 235, 235}, {80, 150, 255}, {255, 105, 90}, {255, 215, 80}};

struct Point2 {
  double u, v;
};

class Canvas {
 public:
  explicit Canvas(int size) : size_(size), pixels_(static_cast<size_t>(size) * size, kBackground) {}
  void dot(int x, int y, int radius, uint8_t colour) {
    for (int dy = -radius; dy <= radius; ++dy)
      for (int dx = -radius; dx <= radius; ++dx) set(x + dx, y + dy, colour);
  }
  void line(Point2 a, Point2 b, int radius, uint8_t colour) {
    const int steps = std::max(1, static_cast<int>(std::ceil(std::max(std::abs(b.u - a.u), std::abs(b.v - a.v)))));
    for (int i = 0; i <= steps; ++i) {
      const double t = static_cast<double>(i) / steps;
      dot(static_cast<int>(std::lround(a.u + t * (b.u - a.u))), static_cast<int>(std::lround(a.v + t * (b.v - a.v))),
          radius, colour);
    }
  }
  std::vector<uint8_t> take() { return std::move(pixels_); }

 private:
  void set(int x, int y, uint8_t colour) {
    if (x >= 0 && y >= 0 && x < size_ && y < size_) pixels_[static_cast<size_t>(y) * size_ + x] = colour;
  }
  int size_;
  std::vector<uint8_t> pixels_;
};

// Orthographic camera: turn about y by yaw, tilt by pitch; screen u to the right, v down.
struct Camera {
  double cy, sy, cp, sp;
  double scale = 1, du = 0, dv = 0;
  Point2 raw(double x, double y, double z) const {
    const double xr = cy * x + sy * z, zr = -sy * x + cy * z;
    const double yr = cp * y - sp * zr;
    return {xr, -yr};
  }
  Point2 project(double x, double y, double z) const {
    const Point2 p = raw(x, y, z);
    return {p.u * scale + du, p.v * scale + dv};
  }
};

}  // namespace

torch::Tensor joint_positions(const torch::Tensor& motion) {
  ZEST_CHECK(holds_joint_positions(motion),
             "skeleton: expected HY-Motion features [frames, 201], got ", motion.sizes());
  return motion.slice(1, kPositionsAt, kMotionFeatures).to(torch::kFloat64).reshape({motion.size(0), kJoints, 3}).contiguous();
}

GifAnimation render_skeleton(const torch::Tensor& joints, const SkeletonView& view) {
  ZEST_CHECK(joints.dim() == 3 && joints.size(1) == kJoints && joints.size(2) == 3 && joints.size(0) > 0,
             "skeleton: expected joints [frames, 22, 3], got ", joints.sizes());
  ZEST_CHECK(torch::isfinite(joints).all().item<bool>(), "skeleton: the joint positions hold NaN or infinity");
  ZEST_CHECK(view.size >= 32 && view.size <= 2048, "skeleton: picture size ", view.size, " is outside [32, 2048]");
  const auto j = joints.to(torch::kFloat64).contiguous();
  const double* p = j.data_ptr<double>();
  const int64_t frames = j.size(0);
  const double pi = std::acos(-1.0);
  Camera cam{std::cos(view.yaw_degrees * pi / 180), std::sin(view.yaw_degrees * pi / 180),
             std::cos(view.pitch_degrees * pi / 180), std::sin(view.pitch_degrees * pi / 180)};
  // The ground grid spans the joints' x/z range (plus a margin) at the lowest joint's height.
  const auto x = j.select(2, 0), y = j.select(2, 1), z = j.select(2, 2);
  const double ground = y.min().item<double>();
  const double reach = std::max({x.max().item<double>() - x.min().item<double>(), z.max().item<double>() - z.min().item<double>(),
                                 y.max().item<double>() - ground, 1e-3});
  const double x0 = x.min().item<double>() - 0.25 * reach, x1 = x.max().item<double>() + 0.25 * reach;
  const double z0 = z.min().item<double>() - 0.25 * reach, z1 = z.max().item<double>() + 0.25 * reach;
  // Fit every projected joint and grid corner into the picture, 6% margin, the same for all frames.
  double umin = 1e300, umax = -1e300, vmin = 1e300, vmax = -1e300;
  auto extend = [&](Point2 q) {
    umin = std::min(umin, q.u), umax = std::max(umax, q.u), vmin = std::min(vmin, q.v), vmax = std::max(vmax, q.v);
  };
  for (int64_t i = 0; i < frames * kJoints; ++i) extend(cam.raw(p[3 * i], p[3 * i + 1], p[3 * i + 2]));
  for (const double gx : {x0, x1})
    for (const double gz : {z0, z1}) extend(cam.raw(gx, ground, gz));
  const double span = std::max(umax - umin, vmax - vmin);
  cam.scale = 0.88 * view.size / span;
  cam.du = view.size / 2.0 - cam.scale * (umin + umax) / 2;
  cam.dv = view.size / 2.0 - cam.scale * (vmin + vmax) / 2;

  GifAnimation out;
  out.width = out.height = view.size;
  out.palette = kPalette;
  const int stride = std::max(1, static_cast<int>(std::lround(view.fps / 15.0)));
  out.delay_centiseconds = std::max(2, static_cast<int>(std::lround(100.0 * stride / view.fps)));
  const int radius = view.size >= 384 ? 2 : 1;
  constexpr int kGridLines = 9;
  for (int64_t f = 0; f < frames; f += stride) {
    Canvas canvas(view.size);
    for (int g = 0; g < kGridLines; ++g) {
      const double t = static_cast<double>(g) / (kGridLines - 1);
      canvas.line(cam.project(x0 + t * (x1 - x0), ground, z0), cam.project(x0 + t * (x1 - x0), ground, z1), 0, kGrid);
      canvas.line(cam.project(x0, ground, z0 + t * (z1 - z0)), cam.project(x1, ground, z0 + t * (z1 - z0)), 0, kGrid);
    }
    const double* q = p + f * kJoints * 3;
    auto at = [&](int joint) { return cam.project(q[3 * joint], q[3 * joint + 1], q[3 * joint + 2]); };
    for (int joint = 1; joint < kJoints; ++joint) {
      canvas.line(at(kParent[joint]), at(joint), radius, static_cast<uint8_t>(kCentre + kSide[joint]));
    }
    for (int joint = 0; joint < kJoints; ++joint) {
      const Point2 s = at(joint);
      canvas.dot(static_cast<int>(std::lround(s.u)), static_cast<int>(std::lround(s.v)), radius + 1, kJoint);
    }
    out.frames.push_back(canvas.take());
  }
  return out;
}

void write_motion_gif(const std::string& path, const torch::Tensor& motion, const SkeletonView& view) {
  write_gif(path, render_skeleton(joint_positions(motion.to(torch::kCPU)), view));
}

}  // namespace zest
