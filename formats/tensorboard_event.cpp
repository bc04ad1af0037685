// TensorBoard event messages (see tensorboard_event.h).
#include "formats/tensorboard_event.h"

#include "formats/protobuf_wire.h"

namespace zest {
namespace {

// Field numbers, by message.
namespace event {
constexpr int kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5, kSessionLog = 7;
}
namespace summary {
constexpr int kValue = 1;
}
namespace value {
constexpr int kTag = 1, kSimpleValue = 2, kImage = 4, kTensor = 8, kMetadata = 9;
}
namespace image {
constexpr int kHeight = 1, kWidth = 2, kColorspace = 3, kEncoded = 4;
}
namespace metadata {
constexpr int kPluginData = 1;
constexpr int kPluginName = 1;  // in PluginData
}
namespace tensor {
constexpr int kDtype = 1, kShape = 2, kStringVal = 8;
constexpr int kDtString = 7;  // DataType DT_STRING
}
namespace session_log {
constexpr int kStatus = 1;
constexpr int kStart = 1;  // SessionStatus START
}

ProtoWriter event_header(double wall_time, int64_t step) {
  ProtoWriter e;
  e.float64(event::kWallTime, wall_time).int64(event::kStep, step);
  return e;
}

std::string summary_event(double wall_time, int64_t step, const ProtoWriter& one_value) {
  ProtoWriter s;
  s.message(summary::kValue, one_value);
  return event_header(wall_time, step).message(event::kSummary, s).str();
}

}  // namespace

std::string file_version_event(double wall_time) {
  ProtoWriter e;
  e.float64(event::kWallTime, wall_time).bytes(event::kFileVersion, "brain.Event:2");
  return e.str();
}

std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value) {
  ProtoWriter v;
  v.bytes(value::kTag, tag).float32(value::kSimpleValue, value);
  return summary_event(wall_time, step, v);
}

std::string image_event(double wall_time, int64_t step, const std::string& tag, const std::string& encoded,
                        int width, int height, int colorspace) {
  ProtoWriter picture;
  picture.varint(image::kHeight, static_cast<uint64_t>(height))
      .varint(image::kWidth, static_cast<uint64_t>(width))
      .varint(image::kColorspace, static_cast<uint64_t>(colorspace))
      .bytes(image::kEncoded, encoded);
  ProtoWriter v;
  v.bytes(value::kTag, tag).message(value::kImage, picture);
  return summary_event(wall_time, step, v);
}

std::string text_event(double wall_time, int64_t step, const std::string& tag, const std::string& markdown) {
  ProtoWriter plugin;
  plugin.bytes(metadata::kPluginName, "text");
  ProtoWriter meta;
  meta.message(metadata::kPluginData, plugin);
  ProtoWriter scalar_shape;  // no dimensions: a scalar
  ProtoWriter text;
  text.varint(tensor::kDtype, tensor::kDtString).message(tensor::kShape, scalar_shape).bytes(tensor::kStringVal, markdown);
  ProtoWriter v;
  v.bytes(value::kTag, tag).message(value::kMetadata, meta).message(value::kTensor, text);
  return summary_event(wall_time, step, v);
}

std::string session_start_event(double wall_time, int64_t step) {
  ProtoWriter log;
  log.varint(session_log::kStatus, session_log::kStart);
  return event_header(wall_time, step).message(event::kSessionLog, log).str();
}

}  // namespace zest
